from django.urls import path

from panel.operations import views

app_name = "operations"
urlpatterns = [
    path("", views.operation_list, name="list"),
    path("<uuid:pk>/", views.operation_detail, name="detail"),
    path("<uuid:pk>/force-fail/", views.operation_force_fail, name="force-fail"),
]
