from django.urls import path

from panel.monitoring import views

app_name = "monitoring"
urlpatterns = [
    path("", views.alert_list, name="alerts"),
    path("<int:pk>/acknowledge/", views.acknowledge_alert, name="acknowledge"),
]
