"""An engine's answers to /sleep, /wake_up and /is_sleeping are inputs (docs/trust-model.md): the panel and
the gateway read at most ANSWER_LIMIT bytes of them, so an engine that streams a gigabyte costs its own call,
never the process's memory; a junk body is 'not awake yet', never an error."""

import asyncio

import httpx

from panel.deployments.sleeping import ANSWER_LIMIT, answered_with, aread_bounded, says_awake

CHUNK = b"x" * 65536


class Endless(httpx.AsyncByteStream):
    """A body that never ends; counts what was taken from it."""

    def __init__(self):
        self.taken = 0

    async def __aiter__(self):
        while True:
            self.taken += len(CHUNK)
            yield CHUNK


def test_an_endless_answer_is_read_up_to_the_limit_and_no_further():
    """One reader for the panel and the gateway: both wake through sleeping.wake_engine."""
    body = Endless()
    read = asyncio.run(aread_bounded(httpx.Response(200, stream=body)))
    assert len(read) == ANSWER_LIMIT
    assert body.taken <= ANSWER_LIMIT + len(CHUNK)


def test_only_a_well_formed_false_is_awake():
    assert says_awake(200, b'{"is_sleeping": false}')
    assert not says_awake(200, b'{"is_sleeping": true}')
    assert not says_awake(500, b'{"is_sleeping": false}')
    assert not says_awake(200, b"[false]")  # not an object
    assert not says_awake(200, b"x" * ANSWER_LIMIT)  # cut at the limit: not JSON


def test_a_refusal_quotes_a_short_prefix_of_the_answer():
    part = answered_with(503, "错".encode() * 1000)[0]
    assert part["params"]["status"] == 503
    assert len(part["params"]["text"]) <= 200
