"""An engine's bad figures cost its request only: usage records carrying a status of 40000 or 3e9 tokens
(as a web process wrote them before the gateway bounded what it reads from engines) are skipped and counted,
and the other callers' usage of the same drain is stored; a record the database refuses is skipped alone."""

import asyncio

import pytest
from django.utils import timezone

from panel.accounts.models import ApiToken
from panel.core.infra import refusals
from panel.gateway import sealing, store
from panel.gateway.access.identity import Caller
from panel.gateway.accounting import usage
from panel.gateway.models import UsageRecord

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def empty_list(_wired_to_redis):
    store.client().delete(store.USAGE_QUEUE, store.DRAIN_LOCK)


def finished(token, request_id: str, **figures) -> usage.Finished:
    fields = {"status": 200, "prompt_tokens": 10, "completion_tokens": 5, **figures}
    return usage.Finished(
        request_id=request_id,
        time=timezone.now().isoformat(),
        token_id=token.pk,
        key=token.label,
        user_id=token.user_id,
        model="qwen",
        endpoint="chat/completions",
        stream=False,
        duration_ms=10.0,
        **fields,
    )


def pushed_as_written(records: list[usage.Finished]) -> None:
    """Sealed onto the usage list as a web process writes it, whatever the figures."""
    from dataclasses import asdict

    for one in records:
        store.client().rpush(store.USAGE_QUEUE, sealing.seal(store.USAGE_QUEUE, asdict(one)))


def test_records_with_an_engines_impossible_figures_are_skipped_and_the_others_stored(bob):
    token, _raw = ApiToken.issue(bob, "app", scopes=["inference"])
    before = refusals.state_counts(store.client()).get("gateway-usage", 0)
    pushed_as_written(
        [
            finished(token, "good-1"),
            finished(token, "status-40000", status=40000),
            finished(token, "tokens-3e9", prompt_tokens=3_000_000_000),
            finished(token, "tokens-negative", completion_tokens=-1_000_000),
            finished(token, "good-2"),
        ]
    )

    assert usage.drain() == 5
    assert set(UsageRecord.objects.values_list("request_id", flat=True)) == {"good-1", "good-2"}
    assert refusals.state_counts(store.client()).get("gateway-usage", 0) == before + 3
    assert store.client().llen(store.USAGE_QUEUE) == 0  # the next drain does not meet them again


def test_the_gateway_records_no_tokens_for_usage_out_of_range_and_charges_none(bob):
    from panel.gateway.proxy.handler import Call

    token, _raw = ApiToken.issue(bob, "app", scopes=["inference"])
    call = Call(Caller.of(token), "qwen", "chat/completions", stream=False)

    async def end():
        await call.end(store.aclient(), 200, "", {"prompt_tokens": 3e9, "completion_tokens": -5})

    asyncio.run(end())
    usage.drain()

    row = UsageRecord.objects.get(request_id=call.request_id)
    assert (row.prompt_tokens, row.completion_tokens, row.error) == (0, 0, "engine_usage_invalid")


def test_a_record_the_database_refuses_is_skipped_alone_and_the_rest_of_its_batch_stored(bob):
    """A figure no range check covers (attempts, a positive column) that the database refuses: the batch's
    one transaction fails, each record is then stored alone, and only the refused one is skipped."""
    token, _raw = ApiToken.issue(bob, "app", scopes=["inference"])
    before = refusals.state_counts(store.client()).get("gateway-usage", 0)
    pushed_as_written(
        [finished(token, "good-1"), finished(token, "refused", attempts=-1), finished(token, "good-2")]
    )

    assert usage.drain() == 3
    assert set(UsageRecord.objects.values_list("request_id", flat=True)) == {"good-1", "good-2"}
    assert refusals.state_counts(store.client()).get("gateway-usage", 0) == before + 1
    assert store.client().llen(store.USAGE_QUEUE) == 0
