"""The gateway's failover pieces that need no engine: what an excluded entry can do, which answers are tried
again elsewhere, the error event that ends a cut stream, and a stream read up to its first piece."""

import asyncio
from dataclasses import dataclass

import httpx
import orjson

from panel.gateway.instances import failover


@dataclass(frozen=True)
class Instance:
    id: str


def test_an_excluded_entry_only_takes_instances_out():
    pool = [Instance("a/0"), Instance("b/0")]
    found = {"a/0": {"cause": "npu_failed"}, "ghost/0": {"cause": "npu_failed"}}
    assert failover.usable(pool, found) == [Instance("b/0")]
    assert failover.usable(pool, {}) == pool


def test_server_errors_and_the_engines_key_are_retried_client_errors_are_not():
    assert [s for s in (400, 401, 404, 413, 422, 429, 500, 502, 503, 504) if failover.retryable(s)] == [
        401,
        500,
        502,
        503,
        504,
    ]


def event_of(chunk: bytes) -> dict:
    assert chunk.startswith(b"data: ")
    assert chunk.endswith(b"\n\n")
    return orjson.loads(chunk[6:])["error"]


def test_a_cut_on_a_failed_npu_names_the_npu_its_node_and_the_signal():
    cause = {"cause": "npu_failed", "node": "ascend-2", "npu": 5, "signal": "ecc_burst"}
    chunk, code = failover.cut_event(cause, httpx.ReadError("gone"))
    error = event_of(chunk)
    assert code == error["code"] == "npu_failed"
    assert error["type"] == "server_error"
    assert error["param"] is None
    assert error["message"].startswith("NPU 5 on node ascend-2 failed (ecc_burst) while this answer")


def test_a_cut_on_a_draining_node_says_so():
    chunk, code = failover.cut_event({"cause": "node_draining", "node": "ascend-1"}, None)
    assert code == "node_draining"
    assert "Node ascend-1 is being drained" in event_of(chunk)["message"]


def test_a_cut_with_no_known_cause_names_the_broken_connection_or_the_timeout():
    chunk, code = failover.cut_event(None, httpx.RemoteProtocolError("peer closed"))
    assert code == "upstream_broken"
    assert "broke off mid-stream (RemoteProtocolError)" in event_of(chunk)["message"]
    chunk, _ = failover.cut_event(None, httpx.ReadTimeout("slow"))
    assert "(timed out)" in event_of(chunk)["message"]


class Pieces(httpx.AsyncByteStream):
    def __init__(self, pieces, fail_after=None):
        self.pieces, self.fail_after, self.closed = pieces, fail_after, False

    async def __aiter__(self):
        for index, piece in enumerate(self.pieces):
            if index == self.fail_after:
                raise httpx.ReadError("engine gone")
            yield piece
        if self.fail_after == len(self.pieces):
            raise httpx.ReadError("engine gone")

    async def aclose(self):
        self.closed = True


def started_then_read(response: httpx.Response) -> tuple[bool, list[bytes]]:
    async def run():  # one event loop, as in the gateway: the stream's reader lives on in it
        started = await failover.started(response)
        return started, [piece async for piece in response.stream]

    return asyncio.run(run())


def test_a_stream_read_to_its_first_piece_still_gives_every_piece():
    body = Pieces([b"data: 1\n\n", b"data: 2\n\n", b"data: [DONE]\n\n"])
    started, pieces = started_then_read(httpx.Response(200, stream=body))
    assert started is True
    assert pieces == [b"data: 1\n\n", b"data: 2\n\n", b"data: [DONE]\n\n"]


def test_a_stream_cut_before_its_first_piece_is_not_started_and_is_closed():
    for body in (Pieces([b"data: 1\n\n"], fail_after=0), Pieces([])):
        response = httpx.Response(200, stream=body)
        assert asyncio.run(failover.started(response)) is False
        assert body.closed
