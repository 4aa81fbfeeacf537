"""DRF throttles whose rates come from settings at request time (PANEL_API_THROTTLE_ANON / _USER).

DRF's own classes read their rates once, when the module is imported; these read them per request, so a
changed setting (or a test's) applies at once. An empty rate means no limit."""

from django.conf import settings
from rest_framework.throttling import AnonRateThrottle, UserRateThrottle

from panel.core.client_ip import client_ip


class _SettingsRate:
    setting = ""

    def get_rate(self):
        return getattr(settings, self.setting, "") or None

    def allow_request(self, request, view):
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request, view)

    def get_ident(self, request):
        # DRF's own reads any X-Forwarded-For a client writes: a fresh value per request escaped the limit.
        return client_ip(request) or "unknown"


class AnonThrottle(_SettingsRate, AnonRateThrottle):
    setting = "PANEL_API_THROTTLE_ANON"


class UserThrottle(_SettingsRate, UserRateThrottle):
    setting = "PANEL_API_THROTTLE_USER"
