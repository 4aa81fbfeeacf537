"""The fleet bench's figures (bench/fleet.py): each measured window's, from what the viewers received, what
the load handed the broker and what the panel stored; then, over the windows, the median, the spread and
the targets.

A window is three phases of the same length: ingest (no viewer), push (websockets), polling (REST). Its
figures:
  p99_ms, p50_ms        sample time on the agent → frame received, over the push phase;
  lost                  samples of each viewer's on-screen nodes the load sent inside the push phase and that
                        viewer never got (a node on three screens counts three times);
  not_stored            samples of every node (on a screen or not) sent inside the push phase that the
                        panel's live store (the Redis ring a reconnecting dashboard fetches from) lacks;
  sample_hz             samples a second per node the load sent (below 1 when the machine starves it);
  panel_cpu_cores       web, panel workers and beat (with their children), push phase;
  infra_cpu_cores       PostgreSQL, RabbitMQ and Redis, push phase (live_viewers.Server: what listens on the
                        ports the panel uses, its children, its reaped children);
  ingest_cpu_cores      the panel with no viewer;
  push_vs_poll          CPU per delivered sample, polling ÷ push, of the web processes (delivery is their
                        work); _panel: of the panel's processes, ingest included; _all_in: of the panel and
                        the infrastructure together;
  db_rows_per_s         rows inserted, updated or deleted in the bench's database over the three phases;
  ingest_lag_ms         p50 and p99 of agent → panel alone (each node's last sample, read after push);
  agent_to_panel_ms,    p50 and p99 of every frame's latency over the push phase, split where the panel took
  panel_to_viewer_ms    its batch in (the frame's `received`): the ingest's queueing, and the drain, fan-out
                        and delivery after it;
  viewer_loop_lag_ms    p50 and p99 of how late the viewers' own event loop woke over the push phase: the
                        bench's own delay inside p99_ms (its viewers share the panel's cores; browsers
                        would not);
  publish_errors        publishes (and queue reads) of the load that failed, by kind, over the whole window;
  deaths                panel processes (or the load) that exited during it.
"""

import statistics
from collections import Counter
from itertools import islice
from urllib.parse import quote

from bench.live_viewers import Window, latencies, push_vs_poll, quantile
from tests.browser.fake_fleet import NPUS_PER_NODE
from workers.celery_app import transport_options
from workers.topology import HEARTBEAT_QUEUE, INGEST_QUEUE, METRICS_QUEUE, PANEL_QUEUE

INFRA = ("postgres", "rabbitmq", "redis")
# (figure, worst of the windows, the bound it must meet), from the fleet's targets at 512 nodes.
TARGETS = {
    "p99_under_500_ms": ("p99_ms", max, lambda v: v < 500),
    "nothing_lost": ("lost_all", max, lambda v: v == 0),
    "panel_at_most_1_core": ("panel_cpu_cores", max, lambda v: v <= 1.0),
    "push_5x_cheaper_web": ("push_vs_poll", min, lambda v: v >= 5),
    "push_1_5x_cheaper_all_in": ("push_vs_poll_all_in", min, lambda v: v >= 1.5),
}
SUMMED = ("lost", "not_stored")


def history_rows(nodes: int, days: int, minute_days: int) -> int:
    """Metric history rows `days` of `nodes` leave in the tables: one per NPU and host a minute for the
    newest `minute_days`, one an hour before that (the hourly prune's fold,
    panel.monitoring.metrics.rollup)."""
    series = nodes * (NPUS_PER_NODE + 1)
    at_minutes = min(days, minute_days)
    return series * (at_minutes * 24 * 60 + (days - at_minutes) * 24)


def screens(names: list[str], viewers: int, on_screen: int) -> list[list[str]]:
    """The nodes each viewer's dashboard page shows: consecutive pages, wrapping round the fleet."""
    size = min(on_screen, len(names))
    return [[names[(i * size + j) % len(names)] for j in range(size)] for i in range(viewers)]


def sent_in(samples: list[tuple[str, int, float]], window: Window) -> dict[str, dict[int, int]]:
    """Per node, seq → sample time (ms) of the samples taken inside `window` that the broker took."""
    sent: dict[str, dict[int, int]] = {}
    for name, seq, epoch in samples:
        if window.holds(epoch):
            sent.setdefault(name, {})[seq] = round(epoch * 1000)
    return sent


def broker_settings(broker) -> dict:
    """The RabbitMQ settings the run used, as the broker reports them: its version, whether the panel
    and the agents dial TLS, publisher confirms, the ingest queues' types and arguments, the node queues'
    types, and the vhost's policies."""
    vhost = quote(broker.vhost, safe="")
    overview = broker.api("GET", "/api/overview").json()
    queues = broker.api("GET", f"/api/queues/{vhost}").json()
    policies = broker.api("GET", f"/api/policies/{vhost}").json()
    node_types = Counter(q.get("type", "classic") for q in queues if q["name"].startswith("node."))
    return {
        "rabbitmq": overview.get("rabbitmq_version"),
        "tls": {"panel": tls(broker.panel_url), "agents": tls(broker.agent_url)},
        "confirm_publish": bool(transport_options(broker.panel_url).get("confirm_publish")),
        "ingest_queues": {
            q["name"]: {"type": q.get("type", "classic"), "arguments": q.get("arguments", {})}
            for q in queues
            if q["name"] in (INGEST_QUEUE, METRICS_QUEUE, HEARTBEAT_QUEUE, PANEL_QUEUE)
        },
        "node_queues": node_types,
        "policies": {p["name"]: p["definition"] for p in policies},
    }  # fmt: skip


def tls(url: str) -> bool:
    return url.startswith("amqps://")


def lost_samples(pages: list[list[str]], received: list[dict], sent: dict[str, dict[int, int]]):
    """(viewer, node, seq) of each sample of a viewer's on-screen nodes that the load sent inside the window
    and that viewer never got."""
    for viewer, (page, got) in enumerate(zip(pages, received, strict=True)):
        for name in page:
            for seq in sorted(set(sent.get(name, {})) - set(got.get(name, {}))):
                yield viewer, name, seq


def lost_on_screen(pages: list[list[str]], received: list[dict], sent: dict[str, dict[int, int]]) -> int:
    return sum(1 for _ in lost_samples(pages, received, sent))


def lost_examples(pages: list[list[str]], received: list[dict], sent: dict, window, most: int = 10) -> list:
    """Up to `most` lost samples, each with how long before the window's end it was taken: where to look
    when a run loses a few."""
    lines = []
    for viewer, name, seq in islice(lost_samples(pages, received, sent), most):
        before_end = window.end - sent[name][seq] / 1000
        lines.append(f"viewer {viewer} node {name} seq {seq}, taken {before_end:.1f} s before the end")
    return lines


def not_stored(sent: dict[str, dict[int, int]], stored: dict[str, set[int]]) -> int:
    """Samples sent inside the window (per node, seq → sample time in ms) whose time the store lacks."""
    return sum(len(set(times.values()) - stored.get(name, set())) for name, times in sent.items())


def window_figures(seconds: float, phases: dict, pages: list[list[str]], measured: dict) -> dict:
    """One window's figures. `phases`: ingest, push and polling as bench/fleet.py's phase() returns them;
    `measured`: what was read around them (sent, stored, nodes, ingest_lag_ms, faults, load_average)."""
    push, polling, ingest = phases["push"], phases["polling"], phases["ingest"]
    sent, lat = measured["sent"], latencies(push["received"])
    lost, missing = lost_on_screen(pages, push["received"], sent), not_stored(sent, measured["stored"])
    # A server the bench found no listener for is left out, not counted as idle.
    infra = {label: round(push["cpu"][label] / seconds, 3) for label in INFRA if label in push["cpu"]}
    ratios = push_vs_poll((push["received"], push["cpu"]), (polling["received"], polling["cpu"]))
    rows = sum(phase["rows"] for phase in (ingest, push, polling))
    return {
        "p99_ms": round(quantile(lat, 0.99), 1),
        "p50_ms": round(quantile(lat, 0.5), 1),
        "lost": lost,
        "not_stored": missing,
        "lost_all": lost + missing,
        "sample_hz": round(sum(map(len, sent.values())) / measured["nodes"] / seconds, 2),
        "panel_cpu_cores": round(push["cpu"]["panel"] / seconds, 3),
        "infra_cpu_cores": {**infra, "total": round(sum(infra.values()), 3)},
        "ingest_cpu_cores": round(ingest["cpu"]["panel"] / seconds, 3),
        **ratios,
        "db_rows_per_s": round(rows / (3 * seconds), 1),
        "ingest_lag_ms": measured["ingest_lag_ms"],
        "agent_to_panel_ms": push["agent_to_panel_ms"],
        "panel_to_viewer_ms": push["panel_to_viewer_ms"],
        "viewer_loop_lag_ms": push["loop_lag_ms"],
        **measured["faults"],
        "load_average": measured["load_average"],
    }


def across(windows: list[dict]) -> dict:
    """The windows' figures as one: the median of each (the sum of what was lost and failed, every death),
    and `spread`, each number's [min, max] over the windows."""
    out: dict = {}
    spread: dict = {}
    for key, first in windows[0].items():
        values = [window[key] for window in windows]
        if key in ("publish_errors",):
            out[key] = {what: sum(v[what] for v in values) for what in first}
        elif key == "deaths":
            out[key] = [death for v in values for death in v]
        elif isinstance(first, dict):
            out[key] = {part: _median([v[part] for v in values]) for part in first}
            spread[key] = {part: _range([v[part] for v in values]) for part in first}
        elif isinstance(first, list):  # [p50, p99] pairs
            out[key] = [_median([v[i] for v in values]) for i in range(len(first))]
        else:
            out[key] = sum(values) if key in SUMMED or key == "lost_all" else _median(values)
            spread[key] = _range(values)
    return {**out, "spread": spread}


def targets(windows: list[dict]) -> dict[str, bool]:
    """Each target, judged on the worst of the windows."""
    return {
        name: bool(meets(worst(window[figure] for window in windows)))
        for name, (figure, worst, meets) in TARGETS.items()
    }


def failures(windows: list[dict]) -> list[str]:
    """What makes the run fail whatever its figures: a publish that failed, a process that died."""
    found = []
    for index, window in enumerate(windows, 1):
        errors = {what: n for what, n in window["publish_errors"].items() if n}
        if errors:
            found.append(f"window {index}: publish errors {errors}")
        if window["deaths"]:
            found.append(f"window {index}: exited {window['deaths']}")
    return found


def _range(values: list) -> list:
    return [min(values), max(values)]


def _median(values: list) -> float:
    numbers = [v for v in values if v == v]  # NaN (nothing delivered) has no place in a median
    return round(statistics.median(numbers), 3) if numbers else float("nan")
