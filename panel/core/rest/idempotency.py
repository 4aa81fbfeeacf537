"""Idempotency-Key for requests that must not run twice (deploy, install, register a model).

A client that retries a request with the same Idempotency-Key header gets the first answer again (with the
response header Idempotent-Replay: true) instead of a second deployment. Keys are per user and per path;
answers are kept in the database with what the call created (panel.accounts.models.IdempotentAnswer) for
PANEL_IDEMPOTENCY_TTL_S. A retry that arrives while the first call still runs gets 409; the same key with
another body or other query parameters gets 422. An answer whose created object is gone since (deleted, or
a deployment being deleted) is not replayed: it is dropped and the request runs anew, so a pipeline rerun
after a teardown deploys again instead of polling a deployment that no longer exists.

panel.core.rest.schema documents the request and response headers on every operation decorated here.
"""

import functools
import hashlib
import json
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

from panel.accounts.models import IdempotentAnswer

log = logging.getLogger(__name__)

HEADER = "Idempotency-Key"
REPLAY_HEADER = "Idempotent-Replay"
MAX_KEY_LENGTH = 200
# Query parameters that change how long the answer takes, not what the request does: a retry may change them.
NOT_PART_OF_THE_REQUEST = frozenset({"wait", "timeout"})
IN_PROGRESS = "in-progress"
CLAIM_TTL_S = 60


def _key_hash(request, key: str) -> str:
    return hashlib.sha256(f"{request.path}\0{key}".encode()).hexdigest()


def _cache_key(request, key: str) -> str:
    return f"idempotency:{request.user.pk}:{_key_hash(request, key)}"


def _body_hash(request) -> str:
    """The request as the key is bound to it: the body and the query parameters that change its effect
    (a dry run and the real run are different requests). The body as parsed, so the same spec in JSON or in
    YAML is the same request; a body JSON cannot hold (an upload) by its fields and its files' digests."""
    query = sorted(
        (name, value)
        for name, values in request.GET.lists()
        if name not in NOT_PART_OF_THE_REQUEST
        for value in values
    )
    data = getattr(request, "data", None)
    try:
        body = orjson.dumps({"body": data, "query": query}, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        lists = getattr(data, "lists", None)
        if lists is not None:  # an upload: a QueryDict holding files
            fields = {name: [_digest(value) for value in values] for name, values in lists()}
            data = {"content_type": request.content_type, "fields": fields}
        # (or JSON orjson does not take, an integer over 64 bits: the stdlib's encoder does)
        body = json.dumps({"body": data, "query": query}, sort_keys=True, default=str).encode()
    return hashlib.sha256(body).hexdigest()


def _digest(value):
    """A form field as itself; an uploaded file as its name, size and SHA-256 (read, then rewound for
    the view)."""
    if not hasattr(value, "chunks"):
        return str(value)
    digest = hashlib.sha256()
    for chunk in value.chunks():
        digest.update(chunk)
    value.seek(0)
    return {"file": value.name, "size": value.size, "sha256": digest.hexdigest()}


def _forget(cache_key: str) -> None:
    try:
        cache.delete(cache_key)
    except RedisError:
        log.warning("Idempotency-Key not released: Redis went away during the request")


def _stored_answer(request, key_hash: str, body_hash: str, creates) -> Response | None:
    """The answer an earlier call with this key got, or 422 when the key came with another request. None
    when there is none, or when what it created is gone (the answer is then dropped: the request runs
    anew)."""
    answer = IdempotentAnswer.objects.filter(user=request.user, key_hash=key_hash).first()
    if answer is None:
        return None
    if answer.created <= timezone.now() - timedelta(seconds=settings.PANEL_IDEMPOTENCY_TTL_S):
        answer.delete()  # expired, not yet pruned: the key is free again (its row would block a new answer)
        return None
    if answer.body_hash != body_hash:
        return Response(
            {
                "detail": _(
                    "This Idempotency-Key was used with another request body or other query parameters; "
                    "use a new key for a new request."
                )
            },
            status=status.HTTP_422_UNPROCESSABLE_ENTITY,
        )
    if creates is not None and not _still_there(answer.data, creates):
        answer.delete()
        return None
    response = Response(answer.data, status=answer.status)
    response[REPLAY_HEADER] = "true"
    return response


def _still_there(data, creates) -> bool:
    """Whether the object the stored answer reports (its `id`, or its `deployment`'s) is still in
    `creates`, the queryset of objects that count as existing."""
    if not isinstance(data, dict):
        return True
    deployment = data.get("deployment")
    created = deployment if isinstance(deployment, dict) else data
    pk = created.get("id")
    if pk is None:
        return True
    return creates.filter(pk=pk).exists()


def idempotent(view_method=None, *, creates=None):
    """Decorate a DRF view method (self, request, ...) that answers a POST (or a PUT that creates):
    `@idempotent`, or `@idempotent(creates=Deployment.objects.exclude(desired_state="deleted"))` when the
    answer reports an object (by `id`, or `deployment.id`) whose disappearance makes a replay a lie.

    The answer is written in the same transaction as whatever the call created, so a retry after any crash
    finds either the call's work and its answer (replayed) or neither (the call runs again). A claim in the
    shared cache makes a retry that arrives while the first call runs wait its turn (409)."""
    if view_method is None:
        return functools.partial(idempotent, creates=creates)

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
        key_hash, body_hash = _key_hash(request, key), _body_hash(request)
        stored = _stored_answer(request, key_hash, body_hash, creates)
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
            return _stored_answer(request, key_hash, body_hash, creates) or Response(
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
            return _stored_answer(request, key_hash, body_hash, creates) or Response(
                {"detail": _("A request with this Idempotency-Key is still being processed.")},
                status=status.HTTP_409_CONFLICT,
            )
        finally:
            _forget(cache_key)
        return response

    wrapper.idempotent = True  # panel.core.rest.schema documents the headers of such operations
    return wrapper
