from django.urls import path

from panel.fabric import views

app_name = "fabric"
urlpatterns = [
    path("nodes/<slug:name>/check/", views.check_node, name="check-node"),
]
