"""Start-up progress of vLLM read from its log lines: (stage, percent, detail) for the progress bar.

Lines may carry process prefixes such as "(EngineCore_DP0 pid=7) " or "(VllmWorker rank=1 pid=9) ", and
vLLM has worded some messages differently across versions (v0 engine, V1 engine, vllm-ascend's model
runner); each pattern below matches anywhere in the line. With several DP ranks or TP workers the same
stage is logged more than once, so StartupProgress never moves backwards.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

from workers.i18n import gettext_noop as _

STAGE_TITLES = {
    "starting": _("Starting vLLM"),
    "engine": _("Initialising the engine"),
    "loading_weights": _("Loading weights"),
    "weights_loaded": _("Weights loaded"),
    "kv_cache": _("Allocating the KV cache"),
    "graph_capture": _("Capturing graphs"),
    "warmed_up": _("Engine warmed up"),
    "api_server": _("Starting the API server"),
    "ready": _("Ready"),
}

LOADING_START, LOADING_END = 15, 60


class StageUpdate(NamedTuple):
    stage: str  # a key of STAGE_TITLES
    percent: int
    detail: str


def _number(text: str) -> float:
    return float(text.replace(",", ""))


SHARDS = re.compile(r"Loading (?:safetensors|pt) checkpoint shards:\s+(\d+)% Completed \| (\d+)/(\d+)")
WEIGHTS_MEMORY = re.compile(r"(?:Model loading|Loading model weights) took ([\d.]+) ?(GiB|GB)")
WEIGHTS_TIME = re.compile(r"Loading weights took ([\d.]+) seconds")
KV_MEMORY = re.compile(r"Available KV cache memory: ([\d.]+) ?(GiB|GB)")
KV_TOKENS = re.compile(r"(?:GPU|NPU|CPU)? ?KV cache size: ([\d,]+) tokens")
KV_BLOCKS = re.compile(r"# (?:NPU|GPU|npu|gpu) blocks: (\d+)")
CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
GRAPH_START = re.compile(r"Capturing (?:CUDA |ACL |NPU |cudagraph )?graph", re.IGNORECASE)
GRAPH_DONE = re.compile(r"Graph capturing finished in ([\d.]+) secs?")
GRAPH_SKIPPED = re.compile(r"not support graph capture")
WARMED_UP = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) seconds")
ENGINE = re.compile(r"Initializing an? (?:V1 )?LLM engine \(v?([^)\s]+)\)")
STARTING = re.compile(r"vLLM API server version (\S+)|Platform plugin (\S+) is activated")
API_SERVER = re.compile(r"Starting vLLM API server(?: \d+)? on (\S+)")
READY = re.compile(r"Application startup complete")


def read_stage(line: str) -> StageUpdate | None:
    """The start-up stage a single log line announces, or None for any other line."""
    if match := SHARDS.search(line):
        percent = int(match.group(1))
        at = LOADING_START + (LOADING_END - LOADING_START) * percent // 100
        return StageUpdate("loading_weights", at, f"{match.group(2)}/{match.group(3)} shards")
    if match := WEIGHTS_MEMORY.search(line):
        return StageUpdate("weights_loaded", 62, f"{_number(match.group(1)):.1f} GiB")
    if match := WEIGHTS_TIME.search(line):
        return StageUpdate("weights_loaded", 61, f"{_number(match.group(1)):.1f} s")
    if match := KV_MEMORY.search(line):
        return StageUpdate("kv_cache", 70, f"{_number(match.group(1)):.1f} GiB")
    if match := KV_TOKENS.search(line):
        return StageUpdate("kv_cache", 75, f"{int(_number(match.group(1))):,} tokens")
    if match := KV_BLOCKS.search(line):
        return StageUpdate("kv_cache", 75, f"{int(match.group(1)):,} blocks")
    if match := CONCURRENCY.search(line):
        detail = f"{_number(match.group(2)):.2f}x at {int(_number(match.group(1))):,} tokens"
        return StageUpdate("kv_cache", 78, detail)
    if match := GRAPH_DONE.search(line):
        return StageUpdate("graph_capture", 88, f"{_number(match.group(1)):.0f} s")
    if GRAPH_SKIPPED.search(line):
        return StageUpdate("graph_capture", 88, "skipped (eager mode)")
    if GRAPH_START.search(line):
        return StageUpdate("graph_capture", 80, "")
    if match := WARMED_UP.search(line):
        return StageUpdate("warmed_up", 90, f"{_number(match.group(1)):.1f} s")
    if match := API_SERVER.search(line):
        return StageUpdate("api_server", 95, match.group(1))
    if READY.search(line):
        return StageUpdate("ready", 100, "")
    if match := ENGINE.search(line):
        return StageUpdate("engine", 10, match.group(1))
    if match := STARTING.search(line):
        return StageUpdate("starting", 5, match.group(1) or match.group(2))
    return None


@dataclass
class StartupProgress:
    """Feed it log lines as they come; it keeps the furthest stage and the figures worth showing."""

    current: StageUpdate = field(default_factory=lambda: StageUpdate("starting", 0, ""))
    weights_gib: float | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None

    def feed(self, line: str) -> StageUpdate | None:
        """The new stage when `line` moves progress forward, else None."""
        update = read_stage(line)
        if update is None:
            return None
        self._remember(line)
        if update.percent < self.current.percent:
            return None
        if update == self.current:
            return None
        self.current = update
        return update

    @property
    def ready(self) -> bool:
        return self.current.stage == "ready"

    def _remember(self, line: str) -> None:
        if match := WEIGHTS_MEMORY.search(line):
            self.weights_gib = _number(match.group(1))
        elif match := KV_TOKENS.search(line):
            # With several DP ranks each engine logs its own cache; the smallest one bounds a request.
            tokens = int(_number(match.group(1)))
            self.kv_cache_tokens = (
                tokens if self.kv_cache_tokens is None else min(tokens, self.kv_cache_tokens)
            )
        elif match := CONCURRENCY.search(line):
            self.max_concurrency = _number(match.group(2))


def relay_startup_lines(emitter, progress: StartupProgress, lines: list[str]) -> None:
    """Send an engine's start-up lines to the operation's log and each stage it reached as progress."""
    for line in lines:
        emitter.log(line)
        update = progress.feed(line)
        if update is not None:
            emitter.progress(
                update.percent,
                STAGE_TITLES[update.stage],
                stage_key=update.stage,
                detail=update.detail,
                kv_cache_tokens=progress.kv_cache_tokens,
                weights_gib=progress.weights_gib,
            )
