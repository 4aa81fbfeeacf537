from django.urls import path

from panel.provisioning import views

app_name = "provisioning"
urlpatterns = [
    path("", views.overview, name="overview"),
    path("profiles/", views.profiles, name="profiles"),
    path("packages/", views.packages, name="packages"),
    path("packages/<int:pk>/delete/", views.delete_package, name="delete-package"),
    path("packages/<int:pk>/confirm/", views.confirm_replacement, name="confirm-replacement"),
    path("packages/<int:pk>/discard/", views.discard_replacement, name="discard-replacement"),
    path("packages/<str:sha256>/<str:name>", views.download, name="download"),
    path("nodes/<slug:name>/", views.node_provisioning, name="node"),
    path("nodes/<slug:name>/preflight/", views.run_preflight, name="preflight"),
    path("nodes/<slug:name>/install/", views.run_install, name="install"),
    path("nodes/<slug:name>/resume/", views.resume, name="resume"),
    path("nodes/<slug:name>/cancel/", views.cancel, name="cancel"),
]
