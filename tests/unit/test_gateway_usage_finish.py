"""A request's end (panel.gateway.accounting.usage.finish: its usage record and the release of its in-flight
count) in a real Redis, when the request's task is cancelled while it ends: a streaming client that leaves the
moment its last chunk ([DONE]) arrived cancels the gateway's task while it records the request. A record cut
off there left the request counted in flight on its engine until the count's TTL (15 minutes), and every drain
of that engine (a rolling update, a failover's move, a stop) waited its whole grace for it."""

import asyncio
import contextlib
import time

import httpx
import pytest
from redis.asyncio import Redis

from panel.gateway import sealing, store
from panel.gateway.access.identity import Caller
from panel.gateway.accounting import usage
from panel.gateway.instances import pool as pools

CALLER = Caller(
    token_id=7, key="bob/app", user_id=1, allowed_models=(), requests_per_minute=None, tokens_per_minute=None
)
ROLE = b'data: {"choices": [{"index": 0, "delta": {"content": "Hi"}}]}\n\n'
USAGE = b'data: {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8}}\n\n'
DONE = b"data: [DONE]\n\n"
INSTANCE = pools.Instance("fo-a/0", 1, "fo-a", "http://127.0.0.1:9/v1", "")
# Enough event-loop turns to reach past every await of the round trip (connection check, send, reply).
TURNS = 40


@pytest.fixture
def redis(gateway_redis, redis_url):
    return redis_url


def finished(request_id: str) -> usage.Finished:
    return usage.Finished(
        request_id=request_id,
        time="2026-12-06T18:55:30+00:00",
        token_id=CALLER.token_id,
        key=CALLER.key,
        user_id=CALLER.user_id,
        model="fo",
        endpoint="chat/completions",
        stream=True,
        status=200,
        completion_tokens=30,
        deployment_id=INSTANCE.deployment_id,
        deployment_name=INSTANCE.deployment,
        instance=INSTANCE.id,
    )


def recorded_ids() -> list[str]:
    items = store.client().lrange(store.USAGE_QUEUE, 0, -1)
    return [sealing.opened(store.USAGE_QUEUE, item)["request_id"] for item in items]


async def settled(request_id: str, timeout: float = 5.0) -> None:
    """Until the request is recorded and no longer counted (a round trip that outlived its task ends)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if request_id in recorded_ids() and pools.outstanding(INSTANCE.id) == 0:
            return
        await asyncio.sleep(0.02)


async def test_a_request_whose_task_is_cancelled_while_it_ends_is_recorded_once_and_released(redis):
    for turns in range(TURNS):
        request_id = f"r{turns}"
        await pools.acquire(store.aclient(), [INSTANCE], request_id)
        # A client of its own: its first round trip opens a connection, as a web process does when its
        # streams have every pooled one in use.
        fresh = Redis.from_url(redis, decode_responses=True)
        record = finished(request_id)
        ending = asyncio.ensure_future(usage.finish(fresh, CALLER, record, INSTANCE, time.time()))
        for _ in range(1 + turns):  # the first turn starts it; the rest take it to one of its awaits
            await asyncio.sleep(0)
        ending.cancel()  # the client left: the ASGI edge cancels the request's task wherever it is
        with contextlib.suppress(asyncio.CancelledError):
            await ending
        await settled(request_id)
        await fresh.aclose()
        where = f"cancelled after {turns} turns"
        assert pools.outstanding(INSTANCE.id) == 0, f"still counted in flight when {where}"
        assert recorded_ids().count(request_id) == 1, f"no usage record when {where}"


class EngineHoldingItsStream(httpx.AsyncByteStream):
    """An engine that has sent its last event ([DONE]) but not yet closed the connection."""

    def __init__(self, events: list[bytes]):
        self.events = events

    async def __aiter__(self):
        for event in self.events:
            yield event
        await asyncio.Event().wait()


def recorded_status(request_id: str) -> int:
    items = store.client().lrange(store.USAGE_QUEUE, 0, -1)
    return next(
        record["status"]
        for record in (sealing.opened(store.USAGE_QUEUE, item) for item in items)
        if record["request_id"] == request_id
    )


@pytest.mark.parametrize("cancelled_in", ["the relay", "the edge's send"])
@pytest.mark.parametrize(("events", "status"), [([ROLE, USAGE, DONE], 200), ([ROLE], 499)])
async def test_a_client_that_leaves_once_done_reached_it_is_recorded_as_served(
    redis, events, status, cancelled_in
):
    from panel.gateway.proxy.handler import Call, Relay
    from panel.gateway.proxy.relay import StreamWatch

    call = Call(CALLER, "fo", "chat/completions", stream=True)
    call.instance = INSTANCE
    await pools.acquire(store.aclient(), [INSTANCE], call.request_id)
    answer = Relay(
        call,
        store.aclient(),
        httpx.Response(200, stream=EngineHoldingItsStream(events)),
        StreamWatch(0.0, strip_usage=False),
    )
    received = []

    async def client():
        async for chunk in answer:
            received.append(chunk)
            if b"".join(received) == b"".join(events) and cancelled_in == "the edge's send":
                # The ASGI edge still sending the last chunk (a write held back by flow control): the
                # cancel lands here, outside the relay, which only its aclose then hears of.
                await asyncio.Event().wait()

    reading = asyncio.ensure_future(client())
    deadline = time.monotonic() + 5
    while b"".join(received) != b"".join(events) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert b"".join(received) == b"".join(events)
    reading.cancel()  # the client went: the ASGI edge cancels the request's task wherever it is
    with contextlib.suppress(asyncio.CancelledError):
        await reading
    await answer.aclose()
    await settled(call.request_id)
    assert recorded_status(call.request_id) == status
