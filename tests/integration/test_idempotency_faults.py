"""Idempotency-Key under faults: with the cache down a POST says so and does nothing, a claim left by a killed
request expires, and a retry after a crash replays the answer kept with the work (another body is refused)."""

from datetime import timedelta

import pytest
from django.utils import timezone

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


def test_with_redis_down_an_idempotent_post_says_so_does_nothing_and_a_retry_then_works(alice, settings):
    from rest_framework.test import APIRequestFactory, force_authenticate

    from panel.core.rest.idempotency import idempotent

    calls = []

    class View:
        @idempotent
        def post(self, request):
            from rest_framework.response import Response

            calls.append(1)
            return Response({"created": len(calls)}, status=201)

    def post():
        request = APIRequestFactory().post("/x/", HTTP_IDEMPOTENCY_KEY="deploy-42")
        force_authenticate(request, alice)
        request.user = alice
        return View().post(request)

    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens there
            "OPTIONS": {"socket_connect_timeout": 1},
        }
    }
    try:
        down = post()
        assert down.status_code == 503
        assert "Retry with the same Idempotency-Key" in down.data["detail"]
        assert calls == []
    finally:
        settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    assert post().status_code == 201
    replay = post()
    assert (replay.status_code, replay["Idempotent-Replay"], calls) == (201, "true", [1])


def test_a_claim_left_by_a_killed_request_expires_so_the_retry_gets_through(alice):
    import time_machine
    from django.core.cache import cache
    from rest_framework.response import Response
    from rest_framework.test import APIRequestFactory, force_authenticate

    from panel.core.rest import idempotency

    class View:
        @idempotency.idempotent
        def post(self, request):
            return Response({"created": True}, status=201)

    def retry():
        request = APIRequestFactory().post("/api/v1/deployments/", HTTP_IDEMPOTENCY_KEY="pipeline-run-7")
        force_authenticate(request, alice)
        request.user = alice
        return View().post(request)

    with time_machine.travel(timezone.now(), tick=False) as clock:
        probe = type("Request", (), {"user": alice, "path": "/api/v1/deployments/"})()
        key = idempotency._cache_key(probe, "pipeline-run-7")
        cache.add(key, idempotency.IN_PROGRESS, idempotency.CLAIM_TTL_S)  # what the killed request left
        assert retry().status_code == 409
        clock.shift(idempotency.CLAIM_TTL_S + 1)
        assert retry().status_code == 201


def idempotent_call(user, body, view):
    """A DRF request with an Idempotency-Key through `view`, as the API's views receive it."""
    from rest_framework.parsers import JSONParser
    from rest_framework.request import Request
    from rest_framework.test import APIRequestFactory

    raw = APIRequestFactory().post("/api/v1/models/", body, format="json", HTTP_IDEMPOTENCY_KEY="ci-run-99")
    request = Request(raw, parsers=[JSONParser()])
    request.user = user
    return view.post(request)


def test_a_retry_after_a_crash_replays_the_answer_kept_with_the_work_and_another_body_is_refused(bob):
    from django.core.cache import cache
    from rest_framework.response import Response

    from panel.accounts.models import IdempotentAnswer
    from panel.accounts.tasks import prune_idempotent_answers
    from panel.catalog.models import Model
    from panel.core.rest.idempotency import idempotent

    class CreateModel:
        @idempotent
        def post(self, request):
            model = Model.objects.create(name=request.data["name"])
            return Response({"id": model.pk}, status=201)

    first = idempotent_call(bob, {"name": "ci-model"}, CreateModel())
    assert first.status_code == 201
    cache.clear()  # the web process died after its commit: its claim and anything cached are gone
    replay = idempotent_call(bob, {"name": "ci-model"}, CreateModel())
    assert (replay.status_code, replay.data, replay["Idempotent-Replay"]) == (201, first.data, "true")
    assert Model.objects.filter(name="ci-model").count() == 1
    other = idempotent_call(bob, {"name": "another-model"}, CreateModel())
    assert other.status_code == 422
    assert not Model.objects.filter(name="another-model").exists()
    IdempotentAnswer.objects.update(created=timezone.now() - timedelta(days=2))
    assert prune_idempotent_answers() == 1
