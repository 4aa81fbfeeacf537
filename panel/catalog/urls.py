from django.urls import path

from panel.catalog import views

app_name = "catalog"
urlpatterns = [
    path("", views.model_list, name="list"),
    path("register/", views.model_register, name="register"),
    path("recipes/", views.recipe_list, name="recipes"),
    path("<int:pk>/", views.model_detail, name="detail"),
    path("<int:pk>/download/", views.model_download, name="download"),
    path("<int:pk>/inspect/", views.model_inspect, name="inspect"),
    path("artifacts/<int:pk>/inspect/", views.artifact_inspect, name="artifact-inspect"),
    path("artifacts/<int:pk>/convert/", views.artifact_convert, name="artifact-convert"),
    path("artifacts/<int:pk>/atc/", views.artifact_atc, name="artifact-atc"),
    path("artifacts/<int:pk>/copy/", views.artifact_copy, name="artifact-copy"),
    path("artifacts/<int:pk>/delete/", views.artifact_delete, name="artifact-delete"),
]
