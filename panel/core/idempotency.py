"""Idempotency-Key for POSTs that must not run twice (deploy, install).

A client that retries a POST with the same Idempotency-Key header gets the first answer again instead of a
second deployment. Keys are per user and per path; answers are kept in the database with what the call
created (panel.accounts.models.IdempotentAnswer) for PANEL_IDEMPOTENCY_TTL_S. A retry that arrives while the
first call still runs gets 409; the same key with another body gets 422.
"""

import functools
import hashlib
import logging
from datetime import timedelta

import orjson
from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from redis.exceptions import RedisError
from rest_framework import status
from rest_framework.response import Response

log = logging.getLogger(__name__)

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 200
IN_PROGRESS = "in-progress"
CLAIM_TTL_S = 60


def _key_hash(request, key: str) -> str:
    return hashlib.sha256(f"{request.path}\0{key}".encode()).hexdigest()


def _cache_key(request, key: str) -> str:
    return f"idempotency:{request.user.pk}:{_key_hash(request, key)}"


def _body_hash(request) -> str:
    try:
        body = orjson.dumps(getattr(request, "data", None), option=orjson.OPT_SORT_KEYS)
    except TypeError:  # an upload or another body JSON cannot hold: its raw bytes
        body = request.body
    return hashlib.sha256(body).hexdigest()


def _forget(cache_key: str) -> None:
    try:
        cache.delete(cache_key)
    except RedisError:
        log.warning("Idempotency-Key not released: Redis went away during the request")


def _stored_answer(request, key_hash: str, body_hash: str) -> Response | None:
    """The answer an earlier call with this key got, or 422 when the key came with another body."""
    from panel.accounts.models import IdempotentAnswer

    since = timezone.now() - timedelta(seconds=settings.PANEL_IDEMPOTENCY_TTL_S)
    answer = IdempotentAnswer.objects.filter(user=request.user, key_hash=key_hash, created__gt=since).first()
    if answer is None:
        return None
    if answer.body_hash != body_hash:
        return Response(
            {
                "detail": _(
                    "This Idempotency-Key was used with another request body; use a new key for a new "
                    "request."
                )
            },
            status=status.HTTP_422_UNPROCESSABLE_ENTITY,
        )
    response = Response(answer.data, status=answer.status)
    response["Idempotent-Replay"] = "true"
    return response


def idempotent(view_method):
    """Decorate a DRF view method (self, request, ...) that answers a POST.

    The answer is written in the same transaction as whatever the call created, so a retry after any crash
    finds either the call's work and its answer (replayed) or neither (the call runs again). A claim in the
    shared cache makes a retry that arrives while the first call runs wait its turn (409)."""

    @functools.wraps(view_method)
    def wrapper(self, request, *args, **kwargs):
        from panel.accounts.models import IdempotentAnswer

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
        key_hash, body_hash = _key_hash(request, key), _body_hash(request)
        stored = _stored_answer(request, key_hash, body_hash)
        if stored is not None:
            return stored
        cache_key = _cache_key(request, key)
        try:
            # The claim lasts a minute: a web process killed mid-request cannot release it, and its
            # client's retry must get through once that minute ends (and then finds the stored answer).
            claimed = cache.add(cache_key, IN_PROGRESS, CLAIM_TTL_S)
        except RedisError:
            # Without the shared claim two retries could run at once: do nothing, say so, let it retry.
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
            return _stored_answer(request, key_hash, body_hash) or Response(
                {"detail": _("A request with this Idempotency-Key is still being processed.")},
                status=status.HTTP_409_CONFLICT,
            )
        try:
            with transaction.atomic():
                response = view_method(self, request, *args, **kwargs)
                if 200 <= response.status_code < 300:
                    IdempotentAnswer.objects.create(
                        user=request.user,
                        key_hash=key_hash,
                        body_hash=body_hash,
                        status=response.status_code,
                        data=orjson.loads(orjson.dumps(response.data, default=str)),
                    )
        except IntegrityError:
            # A twin of this call committed its answer first; this one's work was rolled back with it.
            return _stored_answer(request, key_hash, body_hash) or Response(
                {"detail": _("A request with this Idempotency-Key is still being processed.")},
                status=status.HTTP_409_CONFLICT,
            )
        finally:
            _forget(cache_key)
        return response

    return wrapper
