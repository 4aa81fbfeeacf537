"""DRF throttles whose rates come from settings at request time (PANEL_API_THROTTLE_ANON / _USER).

DRF's own classes read their rates once, when the module is imported; these read them per request, so a
changed setting (or a test's) applies at once. An empty rate means no limit."""

import logging

from django.conf import settings
from redis.exceptions import RedisError
from rest_framework.throttling import AnonRateThrottle, UserRateThrottle

from panel.core.web.client_ip import client_ip

log = logging.getLogger(__name__)


class _SettingsRate:
    setting = ""

    def get_rate(self):
        return getattr(settings, self.setting, "") or None

    def allow_request(self, request, view):
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        try:
            return super().allow_request(request, view)
        except RedisError as error:
            # The limiter's counts live in Redis; while it restarts, the API answers unlimited rather than
            # failing every request with a 500 (found by the fault tier: Redis killed mid-install).
            log.warning("API throttle skipped: Redis unavailable (%s)", error)
            return True

    def get_ident(self, request):
        # DRF's own reads any X-Forwarded-For a client writes: a fresh value per request escaped the limit.
        return client_ip(request) or "unknown"


class AnonThrottle(_SettingsRate, AnonRateThrottle):
    setting = "PANEL_API_THROTTLE_ANON"


class UserThrottle(_SettingsRate, UserRateThrottle):
    setting = "PANEL_API_THROTTLE_USER"
