from django.urls import path

from panel.forensics import views

app_name = "forensics"
urlpatterns = [
    path("upload/", views.upload, name="upload"),
    path("deployments/<slug:name>/collect/", views.collect, name="collect"),
    path("deployments/<slug:name>/bundles/", views.deployment_bundles, name="deployment-bundles"),
    path("bundles/<int:pk>/download/", views.download, name="download"),
]
