"""Start-up progress of vLLM read from its log lines: (stage, percent, detail) for the progress bar.

Lines may carry process prefixes such as "(EngineCore_DP0 pid=7) " or "(VllmWorker rank=1 pid=9) ", and
vLLM has worded some messages differently across versions (v0 engine, V1 engine, vllm-ascend's model
runner); each pattern below matches anywhere in the line. With several DP ranks or TP workers the same
stage is logged more than once, so StartupProgress never moves backwards.
"""

from __future__ import annotations

import re
from collections.abc import Callable
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


def _shards(match: re.Match) -> StageUpdate:
    at = LOADING_START + (LOADING_END - LOADING_START) * int(match.group(1)) // 100
    return StageUpdate("loading_weights", at, f"{match.group(2)}/{match.group(3)} shards")


def _concurrency(match: re.Match) -> StageUpdate:
    detail = f"{_number(match.group(2)):.2f}x at {int(_number(match.group(1))):,} tokens"
    return StageUpdate("kv_cache", 78, detail)


# Each pattern with the stage its line announces, tried in this order (graph capture's end and its skip
# before its start, whose wording both contain; the engine and start banners last).
_STAGES: list[tuple[re.Pattern, Callable[[re.Match], StageUpdate]]] = [
    (SHARDS, _shards),
    (WEIGHTS_MEMORY, lambda m: StageUpdate("weights_loaded", 62, f"{_number(m.group(1)):.1f} GiB")),
    (WEIGHTS_TIME, lambda m: StageUpdate("weights_loaded", 61, f"{_number(m.group(1)):.1f} s")),
    (KV_MEMORY, lambda m: StageUpdate("kv_cache", 70, f"{_number(m.group(1)):.1f} GiB")),
    (KV_TOKENS, lambda m: StageUpdate("kv_cache", 75, f"{int(_number(m.group(1))):,} tokens")),
    (KV_BLOCKS, lambda m: StageUpdate("kv_cache", 75, f"{int(m.group(1)):,} blocks")),
    (CONCURRENCY, _concurrency),
    (GRAPH_DONE, lambda m: StageUpdate("graph_capture", 88, f"{_number(m.group(1)):.0f} s")),
    (GRAPH_SKIPPED, lambda m: StageUpdate("graph_capture", 88, "skipped (eager mode)")),
    (GRAPH_START, lambda m: StageUpdate("graph_capture", 80, "")),
    (WARMED_UP, lambda m: StageUpdate("warmed_up", 90, f"{_number(m.group(1)):.1f} s")),
    (API_SERVER, lambda m: StageUpdate("api_server", 95, m.group(1))),
    (READY, lambda m: StageUpdate("ready", 100, "")),
    (ENGINE, lambda m: StageUpdate("engine", 10, m.group(1))),
    (STARTING, lambda m: StageUpdate("starting", 5, m.group(1) or m.group(2))),
]


def read_stage(line: str) -> StageUpdate | None:
    """The start-up stage a single log line announces, or None for any other line."""
    for pattern, stage in _STAGES:
        if match := pattern.search(line):
            return stage(match)
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
