"""A node's engine, played by a hostile HTTP server on loopback, answers the real gateway (panel.gateway's
handler, transport and relay, the real Redis and database) with what no engine should send: an answer past
the bound, a stream event that never ends, a trickle with no event, usage of 3e9 or -1e6 tokens or of the
wrong type, a status of 40000, a Content-Length that is not a number, an error body of the wrong shape.
Each costs that request only: another node's deployment answers its callers throughout, and their usage is
recorded and drained; the hostile answers leave no usage that could spend anyone's budget."""

import asyncio
import threading

import orjson
import pytest

from panel.gateway import store
from panel.gateway.accounting import usage
from panel.gateway.models import UsageRecord

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

CHAT = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})


def ok_answer(usage_figures: dict) -> bytes:
    body = orjson.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "choices": [{"message": {"content": "fine"}}],
            "usage": usage_figures,
        }
    )
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


def error_answer(body: bytes) -> bytes:
    return b"HTTP/1.1 400 Bad\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


def sse_head() -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


async def endless_event(writer):
    writer.write(sse_head())
    for _ in range(200):  # 200 x 64 KiB with no blank line
        writer.write(b"data: " + b"x" * 65536)
        await writer.drain()


async def trickle(writer):
    writer.write(sse_head())
    for _ in range(40):
        writer.write(b"x")
        await writer.drain()
        await asyncio.sleep(0.1)


async def huge_body(writer):
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
    for _ in range(100):  # 6.4 MB against a 1 MB bound
        writer.write(b" " * 65536)
        await writer.drain()


def fixed(raw: bytes):
    async def answer(writer):
        writer.write(raw)
        await writer.drain()

    return answer


HOSTILE = {
    "answer-past-the-bound": huge_body,
    "event-without-end": endless_event,
    "trickle-without-events": trickle,
    "usage-3e9": fixed(ok_answer({"prompt_tokens": 3_000_000_000, "completion_tokens": 1})),
    "usage-negative": fixed(ok_answer({"prompt_tokens": -1_000_000, "completion_tokens": 1})),
    "usage-float": fixed(ok_answer({"prompt_tokens": 3e9, "completion_tokens": 1.5})),
    "usage-text": fixed(ok_answer({"prompt_tokens": "lots", "completion_tokens": {"n": 1}})),
    "status-40000": fixed(b"HTTP/1.1 40000 Weird\r\nContent-Length: 2\r\n\r\n{}"),
    "content-length-not-a-number": fixed(b"HTTP/1.1 200 OK\r\nContent-Length: 12abc\r\n\r\n{}"),
    "error-body-of-the-wrong-shape": fixed(error_answer(b'{"error": [1, 2, {"code": {"deep": true}}]}')),
}


class Engines:
    """Loopback HTTP servers in a thread of their own: `serve(behaviour)` returns a port."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.servers = []

    def serve(self, behaviour) -> int:
        async def on_connection(reader, writer):
            try:
                await reader.readuntil(b"\r\n\r\n")
                await behaviour(writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        async def start():
            return await asyncio.start_server(on_connection, "127.0.0.1", 0)

        server = asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)
        self.servers.append(server)
        return server.sockets[0].getsockname()[1]

    def close(self):
        for server in self.servers:
            self.loop.call_soon_threadsafe(server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def engines():
    found = Engines()
    yield found
    found.close()


def deployment_on(node_name: str, name: str, port: int):
    from panel.catalog.models import Model
    from panel.deployments.models import Deployment
    from panel.nodes.models import Node

    node, _ = Node.objects.get_or_create(name=node_name, defaults={"address": "127.0.0.1"})
    deployment = Deployment.objects.create(
        name=name,
        model=Model.objects.get_or_create(name=f"model-{name}")[0],
        desired_state="running",
        observed_state="running",
        spec={"port": port, "served_model_name": name, "parts": [{"node": node_name, "npus": [0]}]},
    )
    deployment.nodes.add(node)
    return deployment


def ask(raw_key: str, model: str, stream: bool = False) -> tuple[int, bytes]:
    """One chat through the gateway's handler, read to its end as the ASGI app reads it."""
    from panel.gateway.proxy.handler import Request, handle

    body = orjson.loads(CHAT) | {"model": model, "stream": stream}

    async def call():
        answer = await handle(
            Request(
                "POST", "/v1/chat/completions", {"authorization": f"Bearer {raw_key}"}, orjson.dumps(body)
            )
        )
        if answer.stream is None:
            return answer.status, answer.body
        chunks = [chunk async for chunk in answer.stream]
        await answer.stream.aclose()  # as the ASGI edge does once the body is sent: the usage record is in
        return answer.status, b"".join(chunks)

    return asyncio.run(call())


@pytest.fixture
def other_callers(engines, bob, settings, _wired_to_redis):
    """Another node's deployment behind a well-behaved engine, and a caller of it: `assert_served()` asks it
    and checks the answer, and that every one of its requests so far was drained into usage rows."""
    from panel.accounts.models import ApiToken

    settings.PANEL_GATEWAY_MAX_ANSWER_BYTES = 1024 * 1024
    settings.PANEL_GATEWAY_MAX_EVENT_BYTES = 256 * 1024
    settings.PANEL_GATEWAY_MAX_EVENT_GAP_S = 1.0
    store.client().delete(store.USAGE_QUEUE, store.DRAIN_LOCK)
    deployment_on(
        "honest-node",
        "honest-chat",
        engines.serve(fixed(ok_answer({"prompt_tokens": 7, "completion_tokens": 3}))),
    )
    _token, raw = ApiToken.issue(bob, "honest-app", scopes=["inference"])
    asked = []

    class Others:
        key = raw

        def assert_served(self):
            status, body = ask(raw, "honest-chat")
            assert status == 200, body
            asked.append(1)
            usage.drain()
            rows = UsageRecord.objects.filter(key__endswith="honest-app", status=200)
            assert rows.count() == len(asked)
            assert {(r.prompt_tokens, r.completion_tokens) for r in rows} == {(7, 3)}

    return Others()


@pytest.mark.attack("hostile-engine")
@pytest.mark.parametrize("behaviour", HOSTILE)
def test_a_hostile_engine_costs_its_own_request_only(behaviour, engines, other_callers, alice):
    from panel.accounts.models import ApiToken

    other_callers.assert_served()
    port = engines.serve(HOSTILE[behaviour])
    deployment_on("attacker-node", "hostile-chat", port)
    _token, raw = ApiToken.issue(alice, "victim-of-the-engine", scopes=["inference"])

    stream = behaviour in ("event-without-end", "trickle-without-events")
    status, body = ask(raw, "hostile-chat", stream=stream)

    assert status < 600
    if stream:
        assert b"upstream_broken" in body  # the stream ends with an error event, not silently
    usage.drain()
    hostile = UsageRecord.objects.filter(key__endswith="victim-of-the-engine")
    assert hostile.count() == 1  # the request is recorded once, with no tokens an engine could inflate
    assert hostile.get().prompt_tokens <= 1
    assert hostile.get().completion_tokens <= 1
    assert len(body) <= 2 * 1024 * 1024
    other_callers.assert_served()


PLAYGROUND_HOSTILE = ("answer-past-the-bound", "status-40000", "content-length-not-a-number")


@pytest.mark.attack("hostile-engine")
@pytest.mark.parametrize("behaviour", PLAYGROUND_HOSTILE)
def test_a_hostile_engine_answering_the_playground_costs_that_request_only(
    behaviour, engines, other_callers, bob
):
    """The playground (POST /api/v1/deployments/<name>/chat/) reads the engine's answer in the web process
    too: past the gateway's bound, or framed as no engine should, it is a 502 for that request; the same
    process serves the admin API and another node's callers after it."""
    from django.test import Client

    from panel.accounts.models import ApiToken

    deployment_on("attacker-node", "hostile-playground", engines.serve(HOSTILE[behaviour]))
    _token, raw = ApiToken.issue(bob, "playground")
    answer = Client().post(
        "/api/v1/deployments/hostile-playground/chat/",
        orjson.loads(CHAT),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {raw}",
    )

    assert answer.status_code == 502, answer.content[:200]
    assert len(answer.content) < 4096  # an error of the panel's, not the engine's answer
    assert Client().get("/api/v1/nodes/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200
    other_callers.assert_served()
