"""Idempotency-Key for POSTs that must not run twice (deploy, install).

A client that retries a POST with the same Idempotency-Key header gets the first answer again instead of a
second deployment. Keys are per user and per path, remembered for PANEL_IDEMPOTENCY_TTL_S in Django's cache
(give production a shared cache, e.g. Redis, when several web processes serve the API). A retry that
arrives while the first call still runs gets 409.
"""

import functools
import hashlib

from django.conf import settings
from django.core.cache import cache
from django.utils.translation import gettext as _
from rest_framework import status
from rest_framework.response import Response

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 200
IN_PROGRESS = "in-progress"


def _cache_key(request, key: str) -> str:
    digest = hashlib.sha256(f"{request.user.pk}\0{request.path}\0{key}".encode()).hexdigest()
    return f"idempotency:{digest}"


def idempotent(view_method):
    """Decorate a DRF view method (self, request, ...) that answers a POST."""

    @functools.wraps(view_method)
    def wrapper(self, request, *args, **kwargs):
        key = request.headers.get(HEADER, "").strip()
        if not key:
            return view_method(self, request, *args, **kwargs)
        if len(key) > MAX_KEY_LENGTH:
            return Response(
                {
                    "detail": _("The Idempotency-Key header is longer than {n} characters.").format(
                        n=MAX_KEY_LENGTH
                    )
                },
                status=status.HTTP_400_BAD_REQUEST,
            )
        cache_key = _cache_key(request, key)
        ttl = getattr(settings, "PANEL_IDEMPOTENCY_TTL_S", 86400)
        if not cache.add(cache_key, IN_PROGRESS, ttl):
            stored = cache.get(cache_key)
            if stored == IN_PROGRESS or stored is None:
                return Response(
                    {"detail": _("A request with this Idempotency-Key is still being processed.")},
                    status=status.HTTP_409_CONFLICT,
                )
            response = Response(stored["data"], status=stored["status"])
            response["Idempotent-Replay"] = "true"
            return response
        try:
            response = view_method(self, request, *args, **kwargs)
        except Exception:
            cache.delete(cache_key)
            raise
        if 200 <= response.status_code < 300:
            cache.set(cache_key, {"status": response.status_code, "data": response.data}, ttl)
        else:
            # A refused request may be corrected and sent again with the same key.
            cache.delete(cache_key)
        return response

    return wrapper
