"""The metrics ingester's pacing (panel.monitoring.metrics.inbox.MetricsIngester._next_drain): while batches
keep coming, drains start LINGER_S apart, so the time a drain's ingest took is not followed by a full
linger."""

from types import SimpleNamespace

from panel.monitoring.metrics import inbox


class Clock:
    """monotonic() for the ingester; the ingester's waits and the ingest the test plays move it on."""

    def __init__(self):
        self.now = 1000.0
        self.waits: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        self.waits.append(round(seconds, 3))
        self.now += seconds
        return False


def test_the_time_a_drain_took_counts_toward_the_next_ones_linger(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(inbox, "time", SimpleNamespace(monotonic=clock.monotonic))
    monkeypatch.setattr(inbox.metrics_inbox, "wait_for_batch", lambda wait_s: b"first")
    monkeypatch.setattr(inbox.metrics_inbox, "take_queued", lambda limit=500: [b"more"])
    ingester = inbox.MetricsIngester()
    ingester._stop = SimpleNamespace(wait=clock.wait, is_set=lambda: False)

    assert ingester._next_drain(flowing=False) == [b"first", b"more"]  # after an idle spell: a full linger
    clock.now += 0.030  # that drain's ingest
    ingester._next_drain(flowing=True)
    clock.now += 0.250  # a slow one on a busy machine
    ingester._next_drain(flowing=True)
    clock.now += 0.100  # exactly the linger
    ingester._next_drain(flowing=True)

    assert clock.waits == [inbox.LINGER_S, 0.07, 0.0, 0.0]
