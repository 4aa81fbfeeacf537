"""When a request waiting on a silent engine is given up (panel.gateway.instances.silence): only for a cause
that means the engine cannot answer, only after SILENT_S of silence, and a client's own cancel stays one."""

import asyncio
from dataclasses import dataclass

import pytest

from panel.gateway.instances import failover, silence


@dataclass(frozen=True)
class Instance:
    id: str


def test_only_a_failed_npu_or_an_offline_node_ends_a_silent_wait():
    long = silence.SILENT_S
    assert silence.cuts({"cause": failover.NODE_OFFLINE, "node": "n1"}, long)
    assert silence.cuts({"cause": failover.NPU_FAILED, "node": "n1", "npu": 0}, long + 5)
    # A draining node's engine still serves and the drain waits for it.
    assert not silence.cuts({"cause": failover.NODE_DRAINING, "node": "n1"}, long)
    assert not silence.cuts(None, long)
    # An engine that spoke within the slice is not given up, whatever the panel says of its node.
    assert not silence.cuts({"cause": failover.NODE_OFFLINE, "node": "n1"}, long - 0.1)


@pytest.fixture
def panel_says(monkeypatch):
    """What the excluded entry says of the instance (the integration tests read the real one)."""
    said: dict = {}

    async def cause_for(_redis, instance):
        return said.get(instance.id)

    monkeypatch.setattr(failover, "cause_for", cause_for)
    monkeypatch.setattr(silence, "SILENT_S", 0.05)
    return said


def test_a_wait_on_an_instance_taken_out_ends_with_its_cause(panel_says):
    panel_says["a/0"] = {"cause": failover.NODE_OFFLINE, "node": "n1"}

    async def waiting():
        with pytest.raises(silence.Excluded) as raised:
            await silence.guarded(None, Instance("a/0"), asyncio.sleep(30))
        assert asyncio.current_task().cancelling() == 0  # the watchdog's cancel was taken back
        return raised.value.cause

    assert asyncio.run(asyncio.wait_for(waiting(), 5)) == {"cause": failover.NODE_OFFLINE, "node": "n1"}


def test_a_wait_on_a_draining_instance_runs_its_course(panel_says):
    panel_says["a/0"] = {"cause": failover.NODE_DRAINING, "node": "n1"}
    assert asyncio.run(silence.guarded(None, Instance("a/0"), asyncio.sleep(0.3, "answer"))) == "answer"


def test_a_client_that_leaves_is_still_a_cancel(panel_says):
    async def leaves():
        task = asyncio.ensure_future(silence.guarded(None, Instance("a/0"), asyncio.sleep(30)))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(leaves())


def test_a_watchdog_lets_a_stream_that_speaks_be(panel_says):
    panel_says["a/0"] = {"cause": failover.NPU_FAILED, "node": "n1", "npu": 0}
    aborted = []

    async def speaking():
        heard = [0.0]
        loop = asyncio.get_running_loop()
        dog = silence.Watchdog(None, Instance("a/0"), lambda: heard[0], lambda: aborted.append(1)).start()
        for _ in range(20):  # an event every 10 ms, for 0.2 s: four slices
            heard[0] = loop.time()
            await asyncio.sleep(0.01)
        assert aborted == []
        assert dog.cause is None
        await asyncio.sleep(0.2)  # then silent: given up
        dog.stop()
        return dog.cause

    assert asyncio.run(speaking())["cause"] == failover.NPU_FAILED
    assert aborted == [1]


def test_with_the_watchdog_off_a_silent_wait_is_not_watched(panel_says, settings):
    """PANEL_GATEWAY_SILENCE_WATCHDOG=0 (bench/gateway.py --watchdog measures the cost): no task at all."""
    settings.PANEL_GATEWAY_SILENCE_WATCHDOG = False
    panel_says["a/0"] = {"cause": failover.NODE_OFFLINE, "node": "n1"}
    assert asyncio.run(silence.guarded(None, Instance("a/0"), asyncio.sleep(0.3, "answer"))) == "answer"

    async def dog():
        return silence.Watchdog(None, Instance("a/0"), lambda: 0.0, lambda: None).start()._task

    assert asyncio.run(dog()) is None
