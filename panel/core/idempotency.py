"""Idempotency-Key for POSTs that must not run twice (deploy, install).

A client that retries a POST with the same Idempotency-Key header gets the first answer again instead of a
second deployment. Keys are per user and per path, remembered for PANEL_IDEMPOTENCY_TTL_S in Django's cache
(give production a shared cache, e.g. Redis, when several web processes serve the API). A retry that
arrives while the first call still runs gets 409.
"""

import functools
import hashlib
import logging

from django.conf import settings
from django.core.cache import cache
from django.utils.translation import gettext as _
from redis.exceptions import RedisError
from rest_framework import status
from rest_framework.response import Response

log = logging.getLogger(__name__)

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 200
IN_PROGRESS = "in-progress"


def _cache_key(request, key: str) -> str:
    digest = hashlib.sha256(f"{request.user.pk}\0{request.path}\0{key}".encode()).hexdigest()
    return f"idempotency:{digest}"


def _forget(cache_key: str) -> None:
    try:
        cache.delete(cache_key)
    except RedisError:
        log.warning("Idempotency-Key not released: Redis went away during the request")


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
        try:
            claimed = cache.add(cache_key, IN_PROGRESS, ttl)
        except RedisError:
            # Without the shared store a retry could not be recognised: do nothing, say so, let it retry.
            return Response(
                {
                    "detail": _(
                        "The panel cannot reach its Redis, where Idempotency-Keys are kept, so nothing was "
                        "done. Retry with the same Idempotency-Key once Redis is back."
                    )
                },
                status=status.HTTP_503_SERVICE_UNAVAILABLE,
                headers={"Retry-After": "5"},
            )
        if not claimed:
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
            _forget(cache_key)
            raise
        if 200 <= response.status_code < 300:
            try:
                cache.set(cache_key, {"status": response.status_code, "data": response.data}, ttl)
            except RedisError:  # done and answered; only a retry's replay is lost (its key stays claimed)
                log.warning("Idempotency-Key answer not stored: Redis went away during the request")
        else:
            # A refused request may be corrected and sent again with the same key.
            _forget(cache_key)
        return response

    return wrapper
