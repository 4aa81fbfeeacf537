from django.urls import path

from panel.catalog import views

app_name = "catalog"
urlpatterns = [path("", views.model_list, name="list")]
