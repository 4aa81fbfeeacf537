"""Disaggregated prefill/decode through the gateway against plain replicas on as many engines, on sim engines.

    .venv/bin/python bench/pd.py [--requests 48] [--concurrency 8] [--prompt-words 2000] [--max-tokens 32]
                                 [--pairs 100]

Starts an embedded redis-server, the web server (panel.web: the panel, gateway included) on a scratch
database, and per layout the sim engines (workers.sim.engine) it needs, each registered as a deployment row
with its role and engine key as apply makes them (prefill rows `<name>`, `<name>-r<i>`, decode rows
`<name>-d<j>`); prefill and decode engines run with --kv-transfer-config and hand the prompt's blocks over
TCP (workers/sim/engine_kv.py). Layouts: 1P1D against 2 plain replicas, 2P2D against 4 plain replicas.
For each, --requests streamed chat requests, --concurrency at once, each a long prompt of --prompt-words
fresh words (no prefix is shared) and --max-tokens tokens out (ignore_eos), through <panel>/v1 with an
inference key: TTFT (to the first streamed token) and TPOT ((last - first) / (tokens - 1)) as the client
sees them, p50 and p99, and the requests that failed.

The PD proxy's overhead: --pairs requests one at a time on the 1P1D layout, each sent once through the
gateway and once as a direct prefill + decode pair (the bench itself plays vLLM's proxy protocol against
the same two engines, with the same prompt length but other words, alternating which goes first); the
overhead of a request is the gateway's time to its last byte minus the direct pair's. The direct pair does
the same work the gateway's is compared with and no more: its prefill goes out as the gateway's does (the
body encoded once with orjson, sent and read by the gateway's own engine transport, panel.gateway.proxy.
transport), and its decode is streamed and read by the same client code as the request through the
gateway. (Its prefill went through the bench's httpx client, which costs more per call than the gateway's
transport, and that difference was counted as the gateway's gain.) While the overhead is measured the
engines run on CPUs of their own, apart from the web server, Redis and the bench's client (`engines_apart`
in the JSON: the first half of the CPUs this process may use, and the rest), as an engine runs on its NPU
host and not on the panel's cores. Sharing 2 cores, each token the gateway relays woke one more process
beside the engine, and the sim's decode, which sleeps its token delay only after it wrote a token, waited
for a core: at load 0.9 its 31 token gaps came out 4.4 ms longer in all when the gateway read them than
when the client did, most of the 7.9 ms measured; with the engines apart, the same both ways.
`--shared-cpus` measures the old way, everything on every CPU. Last line JSON:
{"layouts": {"1P1D": {...}, "plain2": {...}, "2P2D": {...}, "plain4": {...}}, "failed": N,
"overhead_ms": {"p50", "p99", "pairs"}, "gateway_overhead_plain_ms": {...}, "engines_apart": {"engines",
"panel_and_client"} or null, "load_avg": {"start", "end"}};
targets: failed 0, overhead p50 <= 5 ms, p99 <= 25 ms. The same measure on the plain2 layout (gateway against
one engine directly) is the gateway's own cost, printed beside it so the PD proxy's share can be told from
the gateway's. `load_avg` is the machine's 1-minute load average when the run started and ended: on a shared
machine the overhead is mostly the wait for a core at each hop, so a figure means little without it.
"""

import argparse
import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
PYTHON = sys.executable
# Reported name: (served name and primary row, prefill or plain replicas, decode replicas).
LAYOUTS = {
    "1P1D": ("pd11", 1, 1),
    "plain2": ("plain2", 2, 0),
    "2P2D": ("pd22", 2, 2),
    "plain4": ("plain4", 4, 0),
}
SIM_ENV = {"SIM_ENGINE_START_DELAY": "0.2", "SIM_ENGINE_TOKEN_DELAY": "0.02"}
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
layouts = json.loads('{layouts}')
out = {{}}
for served, engines in layouts.items():
    primary = None
    for engine in engines:
        row = Deployment(
            name=engine["name"], model=model, observed_state="running", desired_state="running",
            replica_of=primary, role=engine["role"],
            spec={{"port": engine["port"], "served_model_name": served, "parts": []}},
        )
        engine["key"] = ensure_engine_key(row)
        row.save()
        row.nodes.set([node])
        primary = primary or row
    out[served] = engines
print(json.dumps(out))
print(ApiToken.issue(user, "bench", scopes=["inference"])[1])
"""


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def layout_engines(served: str, prefill: int, decode: int) -> list[dict]:
    from panel.run import free_port

    if not decode:
        names = [(served if i == 1 else f"{served}-r{i}", "") for i in range(1, prefill + 1)]
    else:
        names = [(served if i == 1 else f"{served}-r{i}", "prefill") for i in range(1, prefill + 1)]
        names += [(f"{served}-d{j}", "decode") for j in range(1, decode + 1)]
    return [{"name": name, "role": role, "port": free_port(), "kv_port": free_port()} for name, role in names]


class Stack:
    """redis-server and the web server on a scratch directory, sim engines started per layout."""

    def __init__(self):
        from panel.run import Supervisor

        self.dir = Path(tempfile.mkdtemp(prefix="bench-pd-"))
        env = dict(os.environ, PANEL_MODE="run", DEBUG="0", PANEL_DATA_DIR=str(self.dir), LOG_LEVEL="WARNING")
        env.pop("DATABASE_URL", None)
        self.supervisor = Supervisor(env)
        self.engines: list[subprocess.Popen] = []
        try:
            self._start(env)
        except BaseException:
            self.supervisor.stop()
            raise

    def _start(self, env: dict) -> None:
        from panel import web
        from panel.run import free_port, start_embedded_redis, wait_for_port

        env["REDIS_URL"] = start_embedded_redis(self.supervisor, self.dir, quiet=True)
        self.supervisor.run_once([PYTHON, "manage.py", "migrate", "-v", "0"])
        layouts = {
            served: layout_engines(served, prefill, decode) for served, prefill, decode in LAYOUTS.values()
        }
        setup = SETUP.format(layouts=json.dumps(layouts))
        out = self.supervisor.run_once([PYTHON, "manage.py", "shell", "-c", setup], capture=True)
        *_, rows, self.token = out.strip().splitlines()
        self.layouts = json.loads(rows)
        self.web_port = free_port()
        _python, *server = [*web.argv("127.0.0.1", self.web_port), "--no-access-log"]
        self.supervisor.start("web", [PYTHON, *server], quiet=True)
        wait_for_port(self.web_port, timeout=60)
        self.url = f"http://127.0.0.1:{self.web_port}"

    def start_layout(self, served: str) -> list[dict]:
        engines = self.layouts[served]
        for engine in engines:
            argv = [PYTHON, "-m", "workers.sim.engine", "--port", str(engine["port"]), "--host", "127.0.0.1",
                    "--model", "/models/bench", "--served-model-name", served,
                    "--max-num-seqs", "64"]  # fmt: skip
            if engine["role"]:
                config = {
                    "kv_connector": "NixlConnector", "engine_id": engine["name"],
                    "kv_port": engine["kv_port"],
                    "kv_role": "kv_producer" if engine["role"] == "prefill" else "kv_consumer",
                }  # fmt: skip
                argv += ["--kv-transfer-config", json.dumps(config)]
            env = {**os.environ, **SIM_ENV, "VLLM_API_KEY": engine["key"]}
            self.engines.append(
                subprocess.Popen(
                    argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
            )
        deadline = time.monotonic() + 60
        for engine in engines:
            while not _healthy(engine["port"]):
                if time.monotonic() > deadline:
                    raise SystemExit(f"error: sim engine {engine['name']} did not answer /health")
                time.sleep(0.1)
        return engines

    def stop_engines(self) -> None:
        for process in self.engines:
            process.terminate()
        for process in self.engines:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
        self.engines = []

    def stop(self) -> None:
        self.stop_engines()
        self.supervisor.stop()


def cpu_split() -> tuple[set[int], set[int]] | None:
    """(the engines' CPUs, the panel's and the bench client's) for the overhead, or None with one CPU."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    half = len(cpus) // 2
    return set(cpus[:half]), set(cpus[half:])


def _pin(pid: int, cpus: set[int]) -> None:
    """Every thread of `pid` onto `cpus` (a pid's affinity is its main thread's alone); threads it starts
    later take their starter's."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError, FileNotFoundError):
            os.sched_setaffinity(int(task.name), cpus)


@contextlib.contextmanager
def engines_apart(stack: Stack, split: tuple[set[int], set[int]] | None):
    """The running engines on the first CPUs of `split`, the web server, Redis and this process on the
    rest, until the block ends; nothing moves with `split` None."""
    if split is None:
        yield
        return
    engines, panel = split
    everything = os.sched_getaffinity(0)
    panel_side = [process.pid for _name, process in stack.supervisor.children] + [os.getpid()]
    for process in stack.engines:
        _pin(process.pid, engines)
    for pid in panel_side:
        _pin(pid, panel)
    try:
        yield
    finally:
        for pid in [process.pid for process in stack.engines] + panel_side:
            _pin(pid, everything)


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def prompt(rng: random.Random, words: int) -> list[dict]:
    return [{"role": "user", "content": " ".join(f"w{rng.randrange(10**9)}" for _ in range(words))}]


class Timing:
    def __init__(self):
        self.ttft: list[float] = []
        self.tpot: list[float] = []
        self.errors: list[str] = []


async def streamed(
    http: httpx.AsyncClient, url: str, body: dict, headers: dict, timing: Timing | None
) -> float:
    """Stream one chat answer; its time to the last byte in ms (TTFT/TPOT into `timing`)."""
    started = time.perf_counter()
    first = last = None
    tokens = 0
    async with http.stream("POST", url, json=body, headers=headers) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{response.status_code}: {(await response.aread())[:200]!r}")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                raise RuntimeError(str(event["error"])[:200])
            for choice in event.get("choices") or []:
                if (choice.get("delta") or {}).get("content"):
                    last = time.perf_counter()
                    first = first or last
                    tokens += 1
    ended = time.perf_counter()
    if timing is not None and first is not None:
        timing.ttft.append((first - started) * 1000)
        if tokens > 1:
            timing.tpot.append((last - first) * 1000 / (tokens - 1))
    return (ended - started) * 1000


async def load(stack: Stack, served: str, args, seed: int) -> Timing:
    rng = random.Random(seed)
    timing = Timing()
    gate = asyncio.Semaphore(args.concurrency)
    headers = {"Authorization": f"Bearer {stack.token}"}
    limits = httpx.Limits(max_connections=args.concurrency + 4)

    async def one(http: httpx.AsyncClient, messages: list[dict]) -> None:
        body = {"model": served, "messages": messages, "max_tokens": args.max_tokens, "ignore_eos": True,
                "stream": True}  # fmt: skip
        async with gate:
            try:
                await streamed(http, f"{stack.url}/v1/chat/completions", body, headers, timing)
            except (httpx.HTTPError, RuntimeError) as error:
                timing.errors.append(f"{type(error).__name__}: {error}")

    async with httpx.AsyncClient(timeout=httpx.Timeout(300.0, connect=10.0), limits=limits) as http:
        messages = [prompt(rng, args.prompt_words) for _ in range(args.requests)]
        await asyncio.gather(*(one(http, m) for m in messages))
    return timing


def engine_transport():
    """The gateway's own engine transport (panel.gateway.proxy.transport), for the direct pair's prefill: a
    heavier client would count its own cost as the gateway's gain."""
    from panel.gateway.proxy.transport import EngineTransport

    return EngineTransport()


ENGINE_TIMEOUTS = {"connect": 10.0, "read": 300.0, "write": 300.0, "pool": None}


async def direct_pair(http: httpx.AsyncClient, to_engines, prefill: dict, decode: dict, body: dict) -> float:
    """vLLM's proxy protocol played by the bench itself against the engines: ms to the decode's last byte.
    The prefill goes out and is read as the gateway's does (`to_engines`, orjson); the decode is streamed
    by `http` and read by `streamed`, as the request through the gateway is."""
    started = time.perf_counter()
    asked = {**body, "max_tokens": 1, "stream": False, "kv_transfer_params": {
        "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
        "remote_block_ids": None, "remote_host": None, "remote_port": None}}  # fmt: skip
    answer = await to_engines.post(
        f"http://127.0.0.1:{prefill['port']}/v1/chat/completions", orjson.dumps(asked),
        {"Authorization": f"Bearer {prefill['key']}", "Content-Type": "application/json"}, ENGINE_TIMEOUTS,
    )  # fmt: skip
    answer.raise_for_status()
    decoded = {**body, "kv_transfer_params": orjson.loads(answer.content)["kv_transfer_params"]}
    url = f"http://127.0.0.1:{decode['port']}/v1/chat/completions"
    await streamed(http, url, decoded, {"Authorization": f"Bearer {decode['key']}"}, None)
    return (time.perf_counter() - started) * 1000


async def direct_one(http: httpx.AsyncClient, engine: dict, body: dict) -> float:
    """A plain request straight to one engine: ms to its last byte."""
    url = f"http://127.0.0.1:{engine['port']}/v1/chat/completions"
    return await streamed(http, url, body, {"Authorization": f"Bearer {engine['key']}"}, None)


async def overhead(stack: Stack, served: str, engines: list[dict], args) -> tuple[list[float], list[str]]:
    """Per request, the gateway's time minus the same work done directly: a prefill + decode pair for a
    disaggregated layout, one engine for a plain one (the gateway's own cost, the PD proxy's baseline)."""
    rng = random.Random(99)
    prefill = next((e for e in engines if e["role"] == "prefill"), None)
    decode = next((e for e in engines if e["role"] == "decode"), None)

    async def direct_call(http, body):
        if prefill is None:
            return await direct_one(http, engines[0], body)
        return await direct_pair(http, to_engines, prefill, decode, body)

    headers = {"Authorization": f"Bearer {stack.token}"}
    samples, errors = [], []
    to_engines = engine_transport()
    async with httpx.AsyncClient(timeout=httpx.Timeout(300.0, connect=10.0)) as http:
        for index in range(args.pairs + 2):  # the first two warm the connections up and are not counted
            body = {
                "model": served,
                "max_tokens": args.max_tokens,
                "ignore_eos": True,
                "stream": True,
            }
            through = {**body, "messages": prompt(rng, args.prompt_words)}
            direct = {**body, "messages": prompt(rng, args.prompt_words)}
            try:
                if index % 2:
                    gateway_ms = await streamed(
                        http, f"{stack.url}/v1/chat/completions", through, headers, None
                    )
                    direct_ms = await direct_call(http, direct)
                else:
                    direct_ms = await direct_call(http, direct)
                    gateway_ms = await streamed(
                        http, f"{stack.url}/v1/chat/completions", through, headers, None
                    )
            except (httpx.HTTPError, RuntimeError, KeyError) as error:
                errors.append(f"{type(error).__name__}: {error}")
                continue
            if index >= 2:
                samples.append(gateway_ms - direct_ms)
    await to_engines.aclose()
    return samples, errors


def figures(timing: Timing) -> dict:
    def rounded(value):
        return None if value is None else round(value, 1)

    return {
        "requests": len(timing.ttft) + len(timing.errors),
        "ttft_ms": {
            "p50": rounded(percentile(timing.ttft, 0.5)),
            "p99": rounded(percentile(timing.ttft, 0.99)),
        },
        "tpot_ms": {
            "p50": rounded(percentile(timing.tpot, 0.5)),
            "p99": rounded(percentile(timing.tpot, 0.99)),
        },
        "failed": len(timing.errors),
    }


def _overhead(samples: list[float]) -> dict:
    return {
        "p50": round(percentile(samples, 0.5) or 0.0, 2),
        "p99": round(percentile(samples, 0.99) or 0.0, 2),
        "pairs": len(samples),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--prompt-words", type=int, default=2000)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--pairs", type=int, default=100)  # p99 of 40 was the largest sample alone
    parser.add_argument(
        "--shared-cpus",
        action="store_true",
        help="measure the overhead with the engines sharing every CPU with the web server and the client",
    )
    args = parser.parse_args()
    split = None if args.shared_cpus else cpu_split()

    load_at_start = os.getloadavg()[0]
    stack = Stack()
    results: dict[str, dict] = {}
    samples: dict[str, list[float]] = {}
    failed = 0
    try:
        for seed, (layout, (served, _prefill, _decode)) in enumerate(LAYOUTS.items(), start=1):
            engines = stack.start_layout(served)
            timing = asyncio.run(load(stack, served, args, seed))
            results[layout] = figures(timing)
            failed += len(timing.errors)
            for error in timing.errors[:3]:
                print(f"{layout} error: {error}", file=sys.stderr)
            print(f"{layout}: {json.dumps(results[layout])}", file=sys.stderr, flush=True)
            if layout in ("1P1D", "plain2"):
                with engines_apart(stack, split):
                    samples[layout], errors = asyncio.run(overhead(stack, served, engines, args))
                failed += len(errors)
                for error in errors[:3]:
                    print(f"overhead error: {error}", file=sys.stderr)
            stack.stop_engines()
    finally:
        stack.stop()
    result = {
        "layouts": results,
        "failed": failed,
        "overhead_ms": _overhead(samples.get("1P1D") or []),
        "gateway_overhead_plain_ms": _overhead(samples.get("plain2") or []),
        "engines_apart": split and {"engines": sorted(split[0]), "panel_and_client": sorted(split[1])},
        "load_avg": {"start": round(load_at_start, 2), "end": round(os.getloadavg()[0], 2)},
    }
    print(json.dumps(result))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
