from django.apps import AppConfig


class RealtimeConfig(AppConfig):
    name = "panel.realtime"
    label = "realtime"
