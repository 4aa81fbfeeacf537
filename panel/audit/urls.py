from django.urls import path

from panel.audit import views

app_name = "audit"
urlpatterns = [
    path("", views.audit_list, name="list"),
]
