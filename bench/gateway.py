"""The /v1 gateway's cost: the same streaming chats straight to the engines and through the gateway.

    .venv/bin/python bench/gateway.py [--streams 128] [--tokens-per-s 30] [--max-tokens 128]
                                      [--engines 2] [--seconds 15] [--rounds 2] [--watchdog]

Starts an embedded redis-server, the web server (panel.web: the panel, gateway included) on a scratch
database and N sim engines (workers.sim.engine, each with its engine API key, paced like an NPU:
--tokens-per-s per stream), registered as deployments serving one model name. Then, alternating for --rounds
rounds:
  direct:  --streams clients, each streaming chat completions back to back straight to the engines (round
           robin, with the engines' key);
  gateway: the same through <panel>/v1 with an inference key (least outstanding requests picks the engine).
The sim engines and the clients run at nice 10 (they stand in for other machines); redis and the web process
at the usual priority. Each phase warms up for a few seconds, then measures --seconds: generated tokens
received in the window (tokens/s), the time to first token of requests started in it, and the web
process's CPU (user + system).
The added TTFT is the gateway's percentile minus the direct one. The usage rows of the gateway's requests are
drained into the database at the end and counted. The last line is JSON.

--watchdog: what the silent-engine watchdog (panel/gateway/instances/silence.py: one small task per request,
woken every 2 s) costs. A second web server on the same database and Redis runs with
PANEL_GATEWAY_SILENCE_WATCHDOG=0, and each round adds a phase through it right after the gateway phase; the
JSON gains "watchdog": each web process's CPU per request (ms, the window's share as for the gateway figure)
with and without it, their ratio, and the TTFT p50 both ways.
"""

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
PYTHON = sys.executable
MODEL = "bench"
WARMUP_S = 4.0
HELPERS_NICE = 10
SETUP = """
import json
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from panel.accounts.bootstrap import ensure_role_groups
from panel.accounts.models import ApiToken
from panel.catalog.models import Model
from panel.deployments.launch.engine_keys import ensure_engine_key
from panel.deployments.models import Deployment
from panel.nodes.models import Node
ensure_role_groups()
user = get_user_model().objects.create_user("bench", password="bench-password-1")
user.groups.add(Group.objects.get(name="operator"))
node = Node.objects.create(name="bench-node", transport="agent", address="127.0.0.1")
model = Model.objects.create(name="bench-model", source="path")
keys = {{}}
for index, port in enumerate({ports}):
    deployment = Deployment(
        name=f"bench-{{index}}", model=model, observed_state="running", desired_state="running",
        spec={{"port": port, "served_model_name": "{model}", "parts": []}},
    )
    keys[port] = ensure_engine_key(deployment)
    deployment.save()
    deployment.nodes.set([node])
print(json.dumps(keys))
print(ApiToken.issue(user, "bench", scopes=["inference"])[1])
"""
DRAIN = "from panel.gateway.accounting.usage import drain; print(drain())"
PROFILED = """
import cProfile, runpy, signal, sys, time
profile = cProfile.Profile(time.process_time)
sys.argv = ["panel.web", *sys.argv[3:]]
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
profile.enable()
try:
    runpy.run_module("panel.web", run_name="__main__")
finally:
    profile.disable()
    profile.dump_stats({path!r})
"""


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class Stack:
    """redis-server, the web server and the sim engines on a scratch directory; stopped together."""

    def __init__(self, engines: int, tokens_per_s: float, profile: str = "", watchdog_off: bool = False):
        from panel import web
        from panel.run import Supervisor, free_port, start_embedded_redis, wait_for_port

        self.dir = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
        env = dict(os.environ, PANEL_MODE="run", DEBUG="0", PANEL_DATA_DIR=str(self.dir), LOG_LEVEL="WARNING")
        env.pop("DATABASE_URL", None)
        self.supervisor = Supervisor(env)
        env["REDIS_URL"] = start_embedded_redis(self.supervisor, self.dir, quiet=True)
        self.redis = psutil.Process(self.supervisor.children[0][1].pid)
        self.supervisor.run_once([PYTHON, "manage.py", "migrate", "-v", "0"])
        ports = [free_port() for _ in range(engines)]
        out = self.supervisor.run_once(
            [PYTHON, "manage.py", "shell", "-c", SETUP.format(ports=ports, model=MODEL)], capture=True
        )
        *_, keys, self.token = out.strip().splitlines()
        self.engine_keys = {int(port): key for port, key in json.loads(keys).items()}
        self.web_port = free_port()
        _python, *server = [*web.argv("127.0.0.1", self.web_port), "--no-access-log"]
        # Profiled in CPU time, not wall time: on a shared machine waiting for a core is not the gateway's.
        profiled = ["-c", PROFILED.format(path=profile)] if profile else []
        started = self.supervisor.start("web", [PYTHON, *profiled, *server], quiet=True)
        self.web = psutil.Process(started.pid)
        self.web_off, self.url_off = None, ""
        if watchdog_off:  # the same server without the silent-engine watchdog, for --watchdog
            off_port = free_port()
            _python, *off = [*web.argv("127.0.0.1", off_port), "--no-access-log"]
            env_off = {"PANEL_GATEWAY_SILENCE_WATCHDOG": "0"}
            self.web_off = psutil.Process(
                self.supervisor.start("web-off", [PYTHON, *off], env_off, quiet=True).pid
            )
            self.url_off = f"http://127.0.0.1:{off_port}"
        # The engines and the clients stand in for other machines (NPU hosts, applications): from here on
        # this process and what it starts run at HELPERS_NICE, so that on a shared box they take as little
        # CPU as they can from the web process under test. Both phases run with the same helpers.
        os.nice(HELPERS_NICE)
        self.engines = []
        for port, key in self.engine_keys.items():
            engine_env = {
                "VLLM_API_KEY": key,
                "SIM_ENGINE_TOKEN_DELAY": f"{1 / tokens_per_s:.5f}",
                "SIM_ENGINE_START_DELAY": "0",
                "SIM_ENGINE_STATS_INTERVAL": "3600",
            }
            argv = [PYTHON, "-m", "workers.sim.engine", "--port", str(port), "--model", MODEL]
            process = self.supervisor.start(f"engine {port}", argv, env=engine_env, quiet=True)
            self.engines.append(psutil.Process(process.pid))
        for port in [*self.engine_keys, self.web_port]:
            wait_for_port(port, timeout=60)
        if self.url_off:
            wait_for_port(int(self.url_off.rsplit(":", 1)[1]), timeout=60)
        self.url = f"http://127.0.0.1:{self.web_port}"

    def drain(self) -> int:
        out = self.supervisor.run_once([PYTHON, "manage.py", "shell", "-c", DRAIN], capture=True)
        return int(out.strip().splitlines()[-1])

    def stop(self) -> None:
        self.supervisor.stop()


def waited_s(process: psutil.Process) -> float:
    """Seconds the process spent runnable but waiting for a CPU (Linux's schedstat): what a shared machine
    takes from the gateway, apart from what the gateway itself costs."""
    try:
        with open(f"/proc/{process.pid}/schedstat") as stat:
            return int(stat.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


class Phase:
    def __init__(self, name: str, start: float, seconds: float):
        self.name = name
        self.window = (start + WARMUP_S, start + WARMUP_S + seconds)
        self.tokens = 0
        self.ttfts: list[float] = []
        self.requests = 0
        self.errors: list[str] = []

    def counts(self, when: float) -> bool:
        return self.window[0] <= when <= self.window[1]


# A generated token in a chunk: `"content": "x` (the role chunk's content is empty, the last chunk has none).
TOKEN = re.compile(rb'"content": ?"[^"]')
TAIL = 64  # bytes of the previous read kept, so a token split between two reads is counted once


def request_bytes(url: str, headers: dict, body: bytes) -> tuple[str, int, bytes]:
    """(host, port, the HTTP/1.1 request): the client is a bare socket so that it costs far less than
    what it measures (httpx's per-chunk cost is close to the gateway's own)."""
    parts = urlsplit(url)
    lines = [
        f"POST {parts.path} HTTP/1.1",
        f"Host: {parts.netloc}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    return parts.hostname, parts.port, ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def one_stream(target: tuple[str, int, bytes], phase: Phase) -> None:
    host, port, request = target
    started = time.monotonic()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(request)
        status = await reader.readline()
        if b" 200 " not in status:
            phase.errors.append(f"{status.decode(errors='replace').strip()}: {(await reader.read(300))!r}")
            return
        first = None
        tail = b""
        while data := await reader.read(65536):
            now = time.monotonic()
            buffer = tail + data
            tokens = sum(1 for m in TOKEN.finditer(buffer) if m.end() > len(tail))
            tail = buffer[-TAIL:]
            if tokens and first is None:
                first = now
            if tokens and phase.counts(now):
                phase.tokens += tokens
    finally:
        writer.close()
    if phase.counts(started):
        phase.requests += 1
        if first is not None:
            phase.ttfts.append((first - started) * 1000)


async def run_phase(
    name: str, targets: list[tuple[str, dict]], streams: int, seconds: float, max_tokens: int
):
    """`streams` clients streaming back to back over `targets` ((url, headers), round robin)."""
    body = json.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Tell me a long story about Ascend NPUs."}],
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
        }
    ).encode()
    requests = [request_bytes(url, headers, body) for url, headers in targets]
    phase = Phase(name, time.monotonic(), seconds)
    stop_at = phase.window[1]
    turn = 0

    async def worker(index: int):
        nonlocal turn
        await asyncio.sleep(index * WARMUP_S / 2 / streams)  # arrivals spread over the warm-up
        while time.monotonic() < stop_at:
            target = requests[turn % len(requests)]
            turn += 1
            try:
                await one_stream(target, phase)
            except OSError as error:
                phase.errors.append(f"{type(error).__name__}: {error}")

    await asyncio.gather(*(worker(i) for i in range(streams)))
    return phase


def summary(phases: list[Phase], seconds: float) -> dict:
    ttfts = [t for p in phases for t in p.ttfts]
    return {
        "tok_s": round(statistics.fmean(p.tokens / seconds for p in phases), 1),
        "requests": sum(p.requests for p in phases),
        "errors": sum(len(p.errors) for p in phases),
        "ttft_p50_ms": round(percentile(ttfts, 0.5) or 0, 2),
        "ttft_p99_ms": round(percentile(ttfts, 0.99) or 0, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=128)
    parser.add_argument("--tokens-per-s", type=float, default=30.0)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--engines", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--profile-web", default="", help="write the web process's cProfile stats here")
    parser.add_argument(
        "--watchdog", action="store_true", help="also measure the gateway without its watchdog"
    )
    args = parser.parse_args()

    stack = Stack(args.engines, args.tokens_per_s, args.profile_web, args.watchdog)
    unwatched: list[Phase] = []
    unwatched_cpu = 0.0
    try:
        direct_targets = [
            (f"http://127.0.0.1:{port}/v1/chat/completions", {"Authorization": f"Bearer {key}"})
            for port, key in stack.engine_keys.items()
        ]
        gateway_targets = [(f"{stack.url}/v1/chat/completions", {"Authorization": f"Bearer {stack.token}"})]
        # One request each way first: connections, imports and the first database read are not measured.
        asyncio.run(run_phase("prime", gateway_targets + direct_targets, 2, 0.5, 4))
        direct, gateway = [], []
        web_cpu = redis_cpu = web_waited = 0.0
        for round_index in range(args.rounds):
            direct.append(
                asyncio.run(run_phase("direct", direct_targets, args.streams, args.seconds, args.max_tokens))
            )
            web_before, redis_before, wait_before = cpu_s(stack.web), cpu_s(stack.redis), waited_s(stack.web)
            phase = asyncio.run(
                run_phase("gateway", gateway_targets, args.streams, args.seconds, args.max_tokens)
            )
            # The whole phase's CPU (warm-up included) over the whole phase's tokens would need every token
            # counted; the window's share is the fair one: the phase is steady after the warm-up.
            share = args.seconds / (args.seconds + WARMUP_S)
            web_cpu += (cpu_s(stack.web) - web_before) * share
            web_waited += (waited_s(stack.web) - wait_before) * share
            redis_cpu += (cpu_s(stack.redis) - redis_before) * share
            gateway.append(phase)
            if stack.web_off is not None:
                off_targets = [(f"{stack.url_off}/v1/chat/completions", gateway_targets[0][1])]
                off_before = cpu_s(stack.web_off)
                unwatched.append(
                    asyncio.run(
                        run_phase("unwatched", off_targets, args.streams, args.seconds, args.max_tokens)
                    )
                )
                unwatched_cpu += (cpu_s(stack.web_off) - off_before) * share
            print(
                f"round {round_index + 1}: direct {direct[-1].tokens / args.seconds:.0f} tok/s, "
                f"gateway {phase.tokens / args.seconds:.0f} tok/s",
                file=sys.stderr,
            )
        recorded = stack.drain()
    finally:
        stack.stop()

    d, g = summary(direct, args.seconds), summary(gateway, args.seconds)
    gateway_tokens = sum(p.tokens for p in gateway)
    for phase in direct + gateway:
        for error in phase.errors[:3]:
            print(f"{phase.name} error: {error}", file=sys.stderr)
    print(f"direct:  {json.dumps(d)}", file=sys.stderr)
    print(f"gateway: {json.dumps(g)}", file=sys.stderr)
    print(
        f"gateway requests in the windows: {sum(p.requests for p in gateway)}; usage rows recorded (whole "
        f"run): {recorded}; redis cpu {redis_cpu:.2f} s; web process cpu {web_cpu:.2f} s, and "
        f"{web_waited:.2f} s waiting for a cpu (load {os.getloadavg()[0]:.1f}, {os.cpu_count()} cpus)",
        file=sys.stderr,
    )
    result = {
        "streams": args.streams,
        "direct_tok_s": d["tok_s"],
        "gateway_tok_s": g["tok_s"],
        "ratio": round(g["tok_s"] / d["tok_s"], 3) if d["tok_s"] else None,
        "ttft_added_p50_ms": round(g["ttft_p50_ms"] - d["ttft_p50_ms"], 2),
        "ttft_added_p99_ms": round(g["ttft_p99_ms"] - d["ttft_p99_ms"], 2),
        "gateway_cpu_s_per_1k_tokens": round(web_cpu / (gateway_tokens / 1000), 4)
        if gateway_tokens
        else None,
    }
    if unwatched:
        result["watchdog"] = watchdog_figures(gateway, web_cpu, unwatched, unwatched_cpu, g)
    print(json.dumps(result))
    errors = d["errors"] or g["errors"] or sum(len(p.errors) for p in unwatched)
    return 0 if not errors else 1


def watchdog_figures(
    watched: list[Phase], watched_cpu: float, unwatched: list[Phase], unwatched_cpu: float, g
):
    """Web CPU per request (ms) with and without the silent-engine watchdog, and the TTFT p50 both ways."""
    seconds = 1.0  # tok_s is not reported here; summary() needs a window only for it
    off = summary(unwatched, seconds)
    on_requests, off_requests = sum(p.requests for p in watched), sum(p.requests for p in unwatched)
    on_ms = watched_cpu * 1000 / on_requests if on_requests else None
    off_ms = unwatched_cpu * 1000 / off_requests if off_requests else None
    return {
        "cpu_ms_per_request_on": round(on_ms, 3) if on_ms is not None else None,
        "cpu_ms_per_request_off": round(off_ms, 3) if off_ms is not None else None,
        "cpu_ratio_on_off": round(on_ms / off_ms, 3) if on_ms and off_ms else None,
        "requests_on": on_requests,
        "requests_off": off_requests,
        "ttft_p50_ms_on": g["ttft_p50_ms"],
        "ttft_p50_ms_off": off["ttft_p50_ms"],
    }


if __name__ == "__main__":
    sys.exit(main())
