"""Sleep mode in the stand-in engine, as vLLM serves it (vllm/entrypoints/serve/dev/sleep/api_router.py).

The routes exist only with VLLM_SERVER_DEV_MODE=1 (vLLM attaches its dev routers then; otherwise 404):
- POST /sleep?level=0|1|2&mode=abort|wait|keep -> {"status": "sleeping", "level": N}. Level 0 pauses
  scheduling only; level 1 offloads the weights to host memory and frees the KV cache; level 2 drops both.
  Either clears the prefix cache. What was running is aborted (mode abort, the default), waited for (wait)
  or kept paused (keep).
- POST /wake_up[?tags=weights&tags=kv_cache&tags=scheduling] -> {"status": "awake"|"sleeping", "tags": …}:
  without tags all of it; scheduling resumes only once weights and KV cache are back.
- GET /is_sleeping -> {"is_sleeping": bool}.
Requests that come while it sleeps wait (counted in vllm:num_requests_waiting) until it wakes.

An engine launched without --enable-sleep-mode refuses to sleep. On a sim host the engine's HBM follows:
asleep it holds only its runtime, awake again what it held before, so the sim's npu-smi shows the change.
Waking takes SIM_ENGINE_WAKE_S_LEVEL1 seconds (default 0.5: weights back from host memory) or
SIM_ENGINE_WAKE_S_LEVEL2 (default 3: weights loaded again).
"""

import argparse
import os
import threading
import time
from collections.abc import Callable
from typing import Protocol
from urllib.parse import parse_qs

from workers.sim.engine_prefix import PrefixCache, Scheduler

RUNTIME_MB = 512  # what a sleeping engine keeps per NPU: its runtime context and graph pools
SLEEP_TAGS = frozenset(("weights", "kv_cache"))
PAUSE_MODES = ("abort", "wait", "keep")


class SleepError(Exception):
    def __init__(self, status: int, body: dict):
        super().__init__(body)
        self.status, self.body = status, body


def dev_mode() -> bool:
    return os.environ.get("VLLM_SERVER_DEV_MODE", "0").strip() not in ("", "0")


def query_error(name: str, kind: str, message: str, value: str, ctx: dict | None = None) -> SleepError:
    """FastAPI's 422 for a query parameter it cannot validate."""
    detail: dict = {"type": kind, "loc": ["query", name], "msg": message, "input": value}
    if ctx:
        detail["ctx"] = ctx
    return SleepError(422, {"detail": [detail]})


def parse_sleep_query(query: str) -> tuple[int, str]:
    values = parse_qs(query)
    text = values.get("level", ["1"])[-1]
    try:
        level = int(text)
    except ValueError:
        raise query_error(
            "level",
            "int_parsing",
            "Input should be a valid integer, unable to parse string as an integer",
            text,
        ) from None
    if level < 0:
        raise query_error(
            "level", "greater_than_equal", "Input should be greater than or equal to 0", text, {"ge": 0}
        )
    if level > 2:
        raise query_error(
            "level", "less_than_equal", "Input should be less than or equal to 2", text, {"le": 2}
        )
    mode = values.get("mode", ["abort"])[-1]
    if mode not in PAUSE_MODES:
        raise query_error("mode", "literal_error", "Input should be 'abort', 'wait' or 'keep'", mode)
    return level, mode


class SleepingEngine(Protocol):
    """What sleep mode uses of the engine (workers/sim/engine.py), which imports this module."""

    args: argparse.Namespace
    scheduler: Scheduler
    prefix_cache: PrefixCache
    weights_mb: int
    hbm_target_mb: int

    def hold(self, hbm_mb: int) -> None: ...


class SleepMode:
    def __init__(self, engine: SleepingEngine, log: Callable[[str, str, str], None]):
        self.engine = engine
        self.log = log
        self.enabled = bool(engine.args.enable_sleep_mode)
        self.sleeping_tags: set[str] = set()
        self.level: int | None = None
        self.lock = threading.Lock()  # one sleep or wake at a time, as vLLM's engine core runs them

    def is_sleeping(self) -> bool:
        return bool(self.sleeping_tags) or self.engine.scheduler.paused

    def held_mb(self) -> int:
        engine = self.engine
        held = 0 if "weights" in self.sleeping_tags else engine.weights_mb
        if "kv_cache" not in self.sleeping_tags:
            held += engine.hbm_target_mb - engine.weights_mb
        return max(held, min(RUNTIME_MB, engine.hbm_target_mb))

    def sleep(self, level: int, mode: str) -> dict:
        if not self.enabled:
            raise SleepError(
                500,
                {
                    "object": "error",
                    "message": "Sleep mode is not enabled: start the engine with --enable-sleep-mode",
                    "type": "InternalServerError",
                    "param": None,
                    "code": 500,
                },
            )
        engine = self.engine
        with self.lock:
            started = time.monotonic()
            engine.scheduler.pause(mode)
            if mode == "wait":
                self.log(
                    "INFO", "core.py:972", "Waiting for in-flight requests to complete before sleeping..."
                )
                engine.scheduler.wait_idle(timeout=600)
            if level == 0 or "weights" in self.sleeping_tags:
                return {"status": "sleeping", "level": level}
            before = self.held_mb()
            engine.prefix_cache.clear()
            self.sleeping_tags = set(SLEEP_TAGS)
            self.level = level
            engine.hold(self.held_mb())
            freed, kept = (before - self.held_mb()) / 1024, self.held_mb() / 1024
            self.log("INFO", "gpu_worker.py:327", f"Sleep mode freed {freed:.2f} GiB memory, "
                     f"{kept:.2f} GiB memory is still in use.")  # fmt: skip
            self.log(
                "INFO", "abstract.py:390", f"It took {time.monotonic() - started:.6f} seconds to fall asleep."
            )
        return {"status": "sleeping", "level": level}

    def wake_up(self, query: str) -> dict:
        tags = parse_qs(query).get("tags") or None
        self.log("INFO", "api_router.py:49", f"wake up the engine with tags: {tags}")
        with self.lock:
            waking = set(SLEEP_TAGS) if tags is None else set(tags) & SLEEP_TAGS
            waking &= self.sleeping_tags
            if waking:
                self._wait_for(waking)
                self.sleeping_tags -= waking
                self.engine.hold(self.held_mb())
            fully_awake = not self.sleeping_tags
            if fully_awake:
                self.level = None
                self.engine.scheduler.resume()
        return {"status": "awake" if fully_awake else "sleeping", "tags": tags}

    def _wait_for(self, waking: set[str]) -> None:
        """The time a wake takes: weights copied back from host memory (level 1) or loaded again (level 2)."""
        if "weights" not in waking:
            return
        name = "SIM_ENGINE_WAKE_S_LEVEL2" if self.level == 2 else "SIM_ENGINE_WAKE_S_LEVEL1"
        seconds = float(os.environ.get(name, "3" if self.level == 2 else "0.5"))
        time.sleep(seconds)
