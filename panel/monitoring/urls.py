from django.urls import path

from panel.monitoring import notification_views as notifications
from panel.monitoring import views
from panel.monitoring.models import NotificationChannel, Route

app_name = "monitoring"
urlpatterns = [
    path("", views.alert_list, name="alerts"),
    path("<int:pk>/acknowledge/", views.acknowledge_alert, name="acknowledge"),
    path("notifications/", notifications.notifications, name="notifications"),
    path("notifications/channels/", notifications.add_channel, name="channel-add"),
    path("notifications/channels/<int:pk>/test/", notifications.test_channel, name="channel-test"),
    path(
        "notifications/channels/<int:pk>/delete/",
        notifications.delete,
        {"model": NotificationChannel},
        name="channel-delete",
    ),
    path("notifications/routes/", notifications.add_route, name="route-add"),
    path(
        "notifications/routes/<int:pk>/delete/", notifications.delete, {"model": Route}, name="route-delete"
    ),
    path("notifications/silences/", notifications.add_silence, name="silence-add"),
    path("notifications/silences/<int:pk>/end/", notifications.end_silence, name="silence-end"),
]
