"""The fleet bench's load: N agent nodes played by one process (bench/fleet.py starts it with --agents).

Each node joins as the install script joins it (POST /nodes/agent/join/ with its own join token) and then
speaks only through what the join answer gave it: its own RabbitMQ user (one AMQP connection per node, which
may write to the ingest exchange and read its own queue `node.<name>`, nothing else) and its own signing key.
What it sends goes through the agent's own code (workers.events, workers.metrics_inbox, workers.identity):
  - a heartbeat every ASCEND_PANEL_HEARTBEAT_S (5 s), listing the operations it runs, as workers.agent does;
  - a MetricBatch of 8 NPUs and the host every second (tests/browser/fake_fleet.py's drifting figures, a few
    chips Warning or Alarm), the nodes spread evenly over each second;
  - the inventory the panel sends every new node on its first heartbeat: taken from its own queue, its
    signature checked (workers.identity.check_task), answered through an EventEmitter — most nodes at once
    with their NPUs, `--operations` of them keep it running and stream log lines (and a progress event every
    tenth line) until the bench stops them, then end it.
What this process does not do that an agent does: ask whether an operation is still wanted before running it
(workers.asking; one round trip per operation) and sample npu-smi.

Each node's connection publishes as an agent's does (workers.celery_app's transport options: on RabbitMQ the
broker confirms every publish, so a refused one raises instead of vanishing). Every metrics batch the broker
took is written to --sent as "node seq epoch" (what the panel should store and the viewers receive); what it
did, and every publish that failed (by kind), is rewritten to --status as JSON each second, which
bench/fleet.py reads around each window. On SIGTERM the running operations end (cancelled), and it exits.
"""

import argparse
import heapq
import json
import logging
import math
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from random import Random

import httpx
from kombu import Connection

from tests.browser.fake_fleet import FakeNode
from workers import __version__, metrics_inbox
from workers.celery_app import app, ssl_options, transport_options
from workers.contracts import Heartbeat, utcnow
from workers.events import EventEmitter, send_to_panel
from workers.identity import Untrusted, check_task, use_keys
from workers.task_names import AGENT_INVENTORY, node_queue
from workers.topology import agent_queue

log = logging.getLogger("fleet-agents")

JOINS_IN_PARALLEL = 8
QUEUE_POLL_S = 1.0  # a node waiting for its inventory task looks at its queue this often
REPORT_S = 10.0
JOBS = ("metrics", "heartbeat", "poll", "log")
SENT_FLUSH_S = 1.0


class PlayedNode:
    """One node: its join answer, its broker connection, its figures, and its operation if it runs one."""

    def __init__(self, name: str, answer: dict, rng: Random, streams: bool):
        self.name = name
        url = answer["broker_url"]
        options, tls = transport_options(url), ssl_options(url, None) or False
        self.connection = Connection(url, connect_timeout=10, transport_options=options, ssl=tls)
        self.connection.ensure_connection(max_retries=3)
        self.producer = app.amqp.Producer(self.connection, auto_declare=False)
        self.queue = agent_queue(node_queue(name), agent=True).bind(self.connection.default_channel)
        self.fake = FakeNode(name, rng)
        self.streams = streams  # keeps its operation running and streams its log
        self.emitter: EventEmitter | None = None
        self.running: list[str] = []
        self.done: list[str] = []
        self.lines = 0

    def send(self, task_name: str, payload: dict, *, signer=None) -> None:
        send_to_panel(task_name, payload, signer=signer, producer=self.producer)

    def heartbeat(self, interval_s: float) -> None:
        beat = Heartbeat(
            node=self.name,
            time=utcnow(),
            agent_version=__version__,
            interval_s=interval_s,
            running=self.running,
            done=self.done,
        )
        metrics_inbox.push_heartbeat(beat, producer=self.producer)

    def metrics(self, tick: int) -> tuple[int, float]:
        batch = self.fake.batch(tick)
        metrics_inbox.push(batch, producer=self.producer)
        return batch.seq, batch.samples[0].time.timestamp()

    def take_task(self) -> bool:
        """Take one task from the node's own queue, as the agent's worker would; True for the inventory."""
        message = self.queue.get(no_ack=False, accept=["json"])
        if message is None:
            return False
        message.ack()
        task_name, task_id = message.headers.get("task", ""), message.headers.get("id", "")
        _args, kwargs, _embed = message.decode()
        try:
            check_task(task_name, task_id, kwargs)
        except Untrusted as why:
            log.error("%s refused task %s: %s", self.name, task_name, why)
            return False
        if task_name != AGENT_INVENTORY:
            log.warning("%s got %s, which this bench does not play; ignored", self.name, task_name)
            return False
        self.start_operation(kwargs["operation_id"])
        return True

    def start_operation(self, operation_id: str) -> None:
        # No timer flush: this process's one thread owns each node's AMQP connection. A streaming node's
        # next line sends what waits instead, as often as the agent's timer would at these rates.
        self.emitter = EventEmitter(operation_id, self.name, send=self.send, flush_timer=False)
        self.running = [operation_id]
        self.emitter.emit("state", state="running")  # a state leaves at once, as workers.tasks.operation's
        if not self.streams:
            self.emitter.log("npu-smi info: 8 chips")
            self.end_operation("succeeded", result=self.inventory())

    def log_line(self) -> None:
        self.lines += 1
        assert self.emitter is not None, "only a node whose operation runs streams"
        self.emitter.log(f"[{self.name}] step output line {self.lines}")
        if self.lines % 10 == 0:
            self.emitter.progress(min(99.0, self.lines / 10), "streaming")

    def end_operation(self, state: str, **details) -> None:
        assert self.emitter is not None, "only a running operation ends"
        self.emitter.finish(state, **details)
        self.done, self.running, self.emitter = self.running, [], None

    def inventory(self) -> dict:
        sample = self.fake.sample(0)
        npus = [
            {"npu_id": n.npu_id, "chip_id": n.chip_id, "logic_id": n.logic_id, "name": n.name,
             "health": n.health, "hbm_total_mb": n.hbm_total_mb}
            for n in sample.npus
        ]  # fmt: skip
        return {"facts": {"hostname": self.name}, "versions": {}, "npus": npus, "npu_smi_info": ""}

    def close(self) -> None:
        self.connection.release()


def join_all(panel: str, tokens: dict[str, str]) -> dict[str, dict]:
    """Trade each node's join token for its credential and broker URL, as the install script does."""

    def join(client: httpx.Client, name: str) -> tuple[str, dict]:
        response = client.post("/nodes/agent/join/", json={"node": name, "token": tokens[name]})
        if response.status_code != 200:
            raise SystemExit(f"join of {name} failed: HTTP {response.status_code} {response.text[:300]}")
        return name, response.json()

    with httpx.Client(base_url=panel, timeout=60) as client, ThreadPoolExecutor(JOINS_IN_PARALLEL) as pool:
        return dict(pool.map(partial(join, client), tokens))


class Schedule:
    """Timed work of every node on one thread: (due, order, node index, what) in a heap."""

    def __init__(self):
        self.heap: list[tuple[float, int, int, str]] = []
        self.order = 0
        self.worst_lag_s = 0.0

    def at(self, due: float, index: int, what: str) -> None:
        self.order += 1
        heapq.heappush(self.heap, (due, self.order, index, what))

    def next_due(self, stop) -> tuple[float, int, str] | None:
        while not stop():
            due, _order, index, what = self.heap[0]
            wait = due - time.monotonic()
            if wait <= 0:
                heapq.heappop(self.heap)
                self.worst_lag_s = max(self.worst_lag_s, -wait)
                return due, index, what
            time.sleep(min(wait, 0.05))
        return None


def streaming_nodes(names: list[str], count: int) -> set[str]:
    """`count` nodes spread over the fleet that keep their operation running and stream its log."""
    if count <= 0:
        return set()
    return set(names[:: max(1, len(names) // count)][:count])


def play(args) -> None:
    spec = json.loads(Path(args.spec).read_text())
    tokens: dict[str, str] = spec["tokens"]
    names = sorted(tokens)
    started = time.monotonic()
    answers = join_all(spec["panel"], tokens)
    use_keys({name: answers[name]["agent_key"].encode() for name in names})
    rng, streaming = Random(7), streaming_nodes(names, args.operations)
    nodes = [PlayedNode(name, answers[name], rng, name in streaming) for name in names]
    print(f"joined {len(nodes)} nodes in {time.monotonic() - started:.1f} s", flush=True)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    tally, schedule = Tally(Path(args.status)), Schedule()
    try:
        with Path(args.sent).open("a") as sent:
            run_schedule(nodes, schedule, args, tally, sent, stop=lambda: bool(stopping))
    finally:
        for node in nodes:
            if node.emitter is not None:
                node.end_operation("cancelled", error="the bench ended")
            node.close()
        print(tally.line(schedule), file=sys.stderr, flush=True)


class Tally:
    """What the load did and what failed, by kind of job; rewritten whole to `path` (bench/fleet.py reads it
    around each window: an error inside one fails the run)."""

    def __init__(self, path: Path):
        self.path = path
        self.done = {what: 0 for what in JOBS}
        self.errors = {what: 0 for what in JOBS}

    def line(self, schedule: "Schedule") -> str:
        return f"load: done {self.done}, errors {self.errors}, worst lag {schedule.worst_lag_s * 1000:.0f} ms"

    def write(self, schedule: "Schedule") -> None:
        lag_ms = round(schedule.worst_lag_s * 1000)
        status = {"done": self.done, "errors": self.errors, "worst_lag_ms": lag_ms}
        scratch = self.path.with_suffix(".new")
        scratch.write_text(json.dumps(status))
        scratch.replace(self.path)  # a reader never sees half a file


def next_time(due: float, every: float, now: float) -> float:
    """The next tick after `due`; ticks this process fell behind on are skipped, as the agent's sampler
    skips them (a starved machine then sends fewer samples, which bench/fleet.py reports, rather than
    ever older ones)."""
    later = due + every
    if later < now:
        later += math.ceil((now - later) / every) * every
    return later


def _play(node: PlayedNode, what: str, second: int, args, sent) -> bool:
    """One scheduled job of `node`; False once its queue poll took the inventory (no more polls)."""
    if what == "metrics":
        seq, epoch = node.metrics(second)
        sent.write(f"{node.name} {seq} {epoch:.3f}\n")
    elif what == "heartbeat":
        node.heartbeat(args.heartbeat_s)
    elif what == "poll":
        return not node.take_task()
    elif what == "log":
        node.log_line()
    return True


def run_schedule(nodes: list[PlayedNode], schedule: Schedule, args, tally: Tally, sent, stop) -> None:
    """Every node's metrics each second (spread evenly over it), heartbeats, its queue until the inventory
    came, and log lines of the streaming ones, until `stop()`."""
    now, slot = time.monotonic(), 1.0 / len(nodes)
    for index in range(len(nodes)):
        schedule.at(now + index * slot, index, "metrics")
        schedule.at(now + index * slot * args.heartbeat_s, index, "heartbeat")
        schedule.at(now + index * slot * args.heartbeat_s + QUEUE_POLL_S, index, "poll")
    next_flush, next_report = now + SENT_FLUSH_S, now + REPORT_S
    while (job := schedule.next_due(stop)) is not None:
        due, index, what = job
        node = nodes[index]
        follow = {
            "metrics": 1.0,
            "heartbeat": args.heartbeat_s,
            "poll": QUEUE_POLL_S,
            "log": 1 / args.log_lines,
        }
        try:
            if not _play(node, what, int(due - now), args, sent):
                follow["poll"] = None  # the inventory came: its log streams, or it ended at once
                if node.streams:
                    schedule.at(due + follow["log"], index, "log")
            tally.done[what] += 1
        except Exception:
            tally.errors[what] += 1
            log.exception("%s: %s failed", node.name, what)
        if follow[what] is not None:
            schedule.at(next_time(due, follow[what], time.monotonic()), index, what)
        if time.monotonic() >= next_flush:
            next_flush += SENT_FLUSH_S
            sent.flush()
            tally.write(schedule)
        if time.monotonic() >= next_report:
            next_report += REPORT_S
            print(tally.line(schedule), file=sys.stderr, flush=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--spec", help=argparse.SUPPRESS)  # {"panel": URL, "tokens": {node: join token}}
    parser.add_argument("--sent", help=argparse.SUPPRESS)
    parser.add_argument("--status", help=argparse.SUPPRESS)
