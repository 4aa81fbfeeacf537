"""What the live-metrics benches share (bench/metrics_fanout.py, bench/fleet.py): the measured window, viewers
that hold a websocket or poll the REST endpoint, what they received, the tallies made of it, and the CPU of
the servers the panel stands on.

A viewer records, per node, the sequence number and the latency (ms, sample time on the agent → message
received here) of every sample taken inside the window. Samples of a node are its agent's MetricBatch
`seq` numbers.
"""

import asyncio
import json
import re
import statistics
import sys
import time
from datetime import UTC, datetime

import httpx
import orjson
import psutil
import websockets
from websockets.typing import Origin

GRACE_S = 3  # after the window, frames of samples taken inside it may still be on their way


def sample_epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).replace(tzinfo=UTC).timestamp()


class Window:
    """The measured stretch of wall-clock time; samples taken inside it are the ones that count."""

    def __init__(self):
        self.start = self.end = float("inf")

    def holds(self, epoch: float) -> bool:
        return self.start <= epoch <= self.end


async def push_client(
    url: str, token: str, groups: list[str], window: Window, stop, ready, got: dict, parts=None
) -> None:
    """A websocket viewer subscribed to `groups`: records, per node, the sequence numbers and latencies (ms)
    of in-window "metrics" frames. `ready` is set once the panel confirmed the subscription (the
    permission checks take a while on a busy machine). `parts`, when given, gets each such frame's latency
    split where the panel took it in (its `received`): (agent → panel ms, panel → here ms)."""
    origin = Origin(url.replace("ws://", "http://").removesuffix("/ws/"))
    headers = {"Authorization": f"Bearer {token}"}
    async with websockets.connect(url, additional_headers=headers, origin=origin, max_size=None) as ws:
        await ws.send(json.dumps({"type": "subscribe", "groups": groups}))
        while not stop.is_set():
            try:
                raw = await asyncio.wait_for(ws.recv(), 0.5)
            except TimeoutError:
                continue
            arrived = time.time()
            data = orjson.loads(raw)
            for message in data if isinstance(data, list) else [data]:  # frames come several to a message
                if message.get("type") == "subscribed":
                    ready.set()
                if message.get("type") != "metrics":
                    continue
                taken = sample_epoch(message["time"])
                if window.holds(taken):
                    got.setdefault(message["node"], {})[message["seq"]] = (arrived - taken) * 1000
                    if parts is not None:
                        took_in = message["received"]
                        parts.append(((took_in - taken) * 1000, (arrived - took_in) * 1000))


async def poll_client(
    base: str, token: str, nodes: list[str] | None, window: Window, stop, ready, got: dict, every_s=1.0
) -> None:
    """A viewer asking GET /api/v1/metrics/latest/ every `every_s` for `nodes` (every node when None, as the
    dashboard's back-fill does); records the latency of each new in-window sample."""
    headers = {"Authorization": f"Bearer {token}"}
    params: list[tuple[str, str | int | float | bool | None]] = [("node", name) for name in nodes or []]
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as client:
        while not stop.is_set():
            started = time.monotonic()
            response = await client.get("/api/v1/metrics/latest/", params=params)
            arrived = time.time()
            response.raise_for_status()
            ready.set()
            for name, message in response.json()["nodes"].items():
                taken = sample_epoch(message["time"])
                if window.holds(taken):
                    got.setdefault(name, {}).setdefault(message["seq"], (arrived - taken) * 1000)
            await asyncio.sleep(max(0.0, every_s - (time.monotonic() - started)))


def lost_frames(received: list[dict]) -> int:
    """Per node, every sequence number from the first to the last that any client saw was sent; count the
    ones each client is missing (for benches that do not know what was sent)."""
    lost = 0
    for node in {node for got in received for node in got}:
        seen = {seq for got in received for seq in got.get(node, {})}
        expected = set(range(min(seen), max(seen) + 1))
        lost += sum(len(expected - set(got.get(node, {}))) for got in received)
    return lost


def latencies(received: list[dict]) -> list[float]:
    return [ms for got in received for per_node in got.values() for ms in per_node.values()]


def delivered(received: list[dict]) -> int:
    return sum(len(per_node) for got in received for per_node in got.values())


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1]


def cpu_seconds(processes: list[psutil.Process], *, children: bool = True) -> float:
    """User + system CPU seconds of `processes` and (with `children`) of every child they have now:
    uvicorn's and Celery's worker processes. Each process counts once."""
    seen, total = set(), 0.0
    for process in processes:
        try:
            family = [process, *(process.children(recursive=True) if children else [])]
        except psutil.NoSuchProcess:
            continue
        for member in family:
            if member.pid in seen:
                continue
            seen.add(member.pid)
            try:
                times = member.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
    return total


def per_sample_ratio(push: tuple[list[dict], dict], polling: tuple[list[dict], dict], part: str) -> float:
    """Polling ÷ push: CPU seconds of `part` per delivered sample. Each argument is (what the viewers
    received, CPU seconds by part over the window); NaN when either delivered nothing."""
    push_n, poll_n = delivered(push[0]), delivered(polling[0])
    if not push_n or not poll_n or push[1][part] <= 0:
        return float("nan")
    return (polling[1][part] / poll_n) / (push[1][part] / push_n)


def push_vs_poll(push: tuple[list[dict], dict], polling: tuple[list[dict], dict]) -> dict[str, float]:
    """The benches' three ratios: per delivered sample, of the web processes (delivery is their work), of
    the panel's processes (ingest included), and "all_in" (the panel and the servers it stands on)."""
    return {
        f"push_vs_poll{suffix}": round(per_sample_ratio(push, polling, part), 2)
        for suffix, part in (("", "web"), ("_panel", "panel"), ("_all_in", "all_in"))
    }


# A PostgreSQL backend's title: "postgres: [cluster: ]user database client(port) activity".
BACKEND_TITLE = re.compile(r"postgres: (?:\S+: )?\S+ (\S+) (?:\S+\(\d+\)|\[local\])")


class Server:
    """One server the panel stands on (PostgreSQL, RabbitMQ, Redis): the process listening on its port, its
    descendants, and what its exited children used (a PostgreSQL backend per connection often starts and
    ends inside one window; the server reaped it, so its children's times hold that CPU). `database`: count
    only that database's PostgreSQL backends among the living ones (a shared server's others are not the
    panel's; exited ones cannot be told apart)."""

    def __init__(self, label: str, port: int, name: str, database: str | None = None):
        self.label, self.database = label, database
        self.root = listening(port, name)

    def seconds(self) -> dict[tuple[str, int], float]:
        """CPU seconds per (label, pid), the reaped children's under pid 0; {} when the server is unknown."""
        if self.root is None:
            return {}
        try:
            times = self.root.cpu_times()
            members = [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return {}
        found = {(self.label, 0): times.children_user + times.children_system}
        for member in members:
            try:
                if self.database and not self.ours(member):
                    continue
                spent = member.cpu_times()
            except psutil.Error:
                continue
            found[(self.label, member.pid)] = spent.user + spent.system
        return found

    def ours(self, process: psutil.Process) -> bool:
        title = " ".join(process.cmdline())
        backend = BACKEND_TITLE.match(title)
        return backend is None or backend.group(1) == self.database


def listening(port: int, name: str) -> psutil.Process | None:
    """The process named `name` that listens on `port` (what the bench talks to, not another copy of the
    same server on this machine), None when there is none (another host, or no right to look)."""
    try:
        connections = psutil.net_connections("tcp")
    except psutil.AccessDenied:
        return None
    for connection in connections:
        if connection.status == psutil.CONN_LISTEN and connection.laddr.port == port and connection.pid:
            process = psutil.Process(connection.pid)
            if process.name() == name:
                return process
    return None


def spent(before: dict, after: dict) -> dict[str, float]:
    """CPU seconds per label between two `Server.seconds()` maps, over what lived through both."""
    totals: dict[str, float] = {}
    for key, seconds in after.items():
        if key in before:
            totals[key[0]] = totals.get(key[0], 0.0) + seconds - before[key]
    return totals


def cpu_line(label: str, cpu: dict) -> str:
    figures = ", ".join(f"{key} {seconds:.2f}" for key, seconds in cpu.items())
    return f"{label} CPU s: {figures}"


LAG_TICK_S = 0.02


async def loop_lag(stop, lags: list) -> None:
    """How late this process's event loop wakes from a LAG_TICK_S sleep, in ms, until `stop`: the viewers'
    own delay, which the latencies they record include (the bench's viewers share the machine's cores with
    the panel; a browser would not)."""
    while not stop.is_set():
        asked = time.monotonic()
        await asyncio.sleep(LAG_TICK_S)
        lags.append((time.monotonic() - asked - LAG_TICK_S) * 1000)


async def measure_window(
    kind, runs, ready, window, stop, snapshot, *, warmup, seconds, ready_within, lags=None
):
    """Start the viewers (`runs`), wait until each is `ready`, let them warm up, then take `snapshot()` on
    both sides of a window of `seconds` (stamped on `window`); stop them after GRACE_S. (before, after).
    `lags`, when given, gets the viewers' loop lag (ms) over the window (`loop_lag`)."""
    tasks = [asyncio.create_task(run) for run in runs]
    started = time.monotonic()
    await asyncio.wait_for(asyncio.gather(*(event.wait() for event in ready)), ready_within)
    print(f"{kind}: {len(runs)} viewers ready after {time.monotonic() - started:.1f} s", file=sys.stderr)
    await asyncio.sleep(warmup)
    before = snapshot()
    window.start = time.time()
    window_over = asyncio.Event()
    lag_probe = asyncio.create_task(loop_lag(window_over, lags)) if lags is not None else None
    await asyncio.sleep(seconds)
    window_over.set()
    window.end = time.time()
    after = snapshot()
    if lag_probe is not None:
        await lag_probe
    await asyncio.sleep(GRACE_S)
    stop.set()
    for failure in await asyncio.gather(*tasks, return_exceptions=True):
        if failure is not None:
            print(f"{kind} viewer failed: {failure!r}", file=sys.stderr)
    return before, after
