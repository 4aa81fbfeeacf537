"""The panel's AMQP metrics reader (workers.metrics_inbox.AmqpReader) against a connection that delivers a
steady stream, as RabbitMQ does at 512 nodes: a drain takes what has arrived, and does not keep reading
while new lines keep coming."""

import time
from types import SimpleNamespace

from workers import metrics_inbox


class SteadyStream:
    """A connection whose next message arrives `every` seconds, for as long as anyone reads."""

    def __init__(self, reader: metrics_inbox.AmqpReader, every: float):
        self.reader, self.every, self.sent = reader, every, 0

    def drain_events(self, timeout: float) -> None:
        if timeout < self.every:
            time.sleep(timeout)
            raise TimeoutError
        time.sleep(self.every)
        self.sent += 1
        self.reader._on_message(SimpleNamespace(body=b"line %d" % self.sent))


def test_a_drain_takes_what_arrived_instead_of_reading_the_stream_until_it_is_full():
    reader = metrics_inbox.AmqpReader()
    stream = SteadyStream(reader, every=0.002)
    reader._connection = stream
    for n in range(5):  # what came in while the ingester lingered
        reader._on_message(SimpleNamespace(body=b"early %d" % n))

    taken = reader.take(metrics_inbox.DRAIN_MAX)

    assert taken[:5] == [b"early %d" % n for n in range(5)]
    # Reading on until DRAIN_MAX (500) would have held the first lines back for a second of this stream.
    assert len(taken) < 50


def test_a_drain_stops_at_its_limit():
    reader = metrics_inbox.AmqpReader()
    reader._connection = SteadyStream(reader, every=0.0)
    for n in range(10):
        reader._on_message(SimpleNamespace(body=b"%d" % n))

    assert reader.take(4) == [b"0", b"1", b"2", b"3"]
    assert reader.take(100)[:6] == [b"4", b"5", b"6", b"7", b"8", b"9"]


class SlowToRead:
    """A connection holding `waiting` lines that already arrived, each taking `read_s` to read (busy)."""

    def __init__(self, reader: metrics_inbox.AmqpReader, waiting: int, read_s: float):
        self.reader, self.waiting, self.read_s = reader, waiting, read_s

    def drain_events(self, timeout: float) -> None:
        if not self.waiting:
            time.sleep(timeout)
            raise TimeoutError
        time.sleep(self.read_s)
        self.waiting -= 1
        self.reader._on_message(SimpleNamespace(body=b"line"))


def test_a_drain_takes_every_line_already_there_even_when_reading_them_outlasts_the_wait():
    reader = metrics_inbox.AmqpReader()
    reader._connection = SlowToRead(reader, waiting=40, read_s=metrics_inbox.TAKE_WAIT_S / 4)

    taken = reader.take(metrics_inbox.DRAIN_MAX)

    # Stopping at the wait's budget left 36 of them for the next drain, a linger later.
    assert len(taken) == 40
