from django.urls import path

from panel.realtime.consumers import PanelConsumer

websocket_urlpatterns = [path("ws/", PanelConsumer.as_asgi())]
