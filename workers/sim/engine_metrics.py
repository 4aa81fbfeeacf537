"""Counters and histograms of the stand-in engine, exposed in Prometheus text with vLLM's metric names.

Standard library only. Both the pre-0.10 names (vllm:gpu_cache_usage_perc, time_per_output_token,
vllm:gpu_prefix_cache_queries/hits) and the newer ones (vllm:kv_cache_usage_perc, inter_token_latency,
vllm:prefix_cache_queries/hits) are served, so scrapers written for either vLLM generation work against the
sim. Counters are written as prometheus-client writes them: the family in HELP/TYPE, the sample `_total`.
"""

import threading
from dataclasses import dataclass, field

from workers.sim.engine_prefix import Scheduler

# vLLM's TIME_TO_FIRST_TOKEN_BUCKETS (v1/metrics/buckets.py); before 0.11 they stopped at 10 s.
TTFT_BUCKETS: tuple[float, ...] = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75)
TTFT_BUCKETS += (1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TOKEN_GAP_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self):
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        self.total += value
        self.count += 1
        for index, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[index] += 1


class EngineMetrics:
    def __init__(self, model_name: str, kv_cache_tokens: int, scheduler: Scheduler):
        self.model_name = model_name
        self.kv_cache_tokens = max(1, kv_cache_tokens)
        self.lock = threading.Lock()
        self.scheduler = scheduler  # running and waiting are the scheduler's own counts
        self.prefix_queries = 0  # in tokens, as vLLM counts them
        self.prefix_hits = 0
        self.kv_tokens_in_use = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.finished = {"stop": 0, "length": 0}
        self.ttft = Histogram(TTFT_BUCKETS)
        self.token_gap = Histogram(TOKEN_GAP_BUCKETS)
        self.latency = Histogram(LATENCY_BUCKETS)

    @property
    def running(self) -> int:
        return self.scheduler.running

    @property
    def waiting(self) -> int:
        return self.scheduler.waiting

    def start_request(self, prompt_tokens: int, cached_tokens: int) -> None:
        """A request scheduled: its prompt queried the prefix cache and `cached_tokens` of it were hits."""
        with self.lock:
            self.prompt_tokens += prompt_tokens
            self.kv_tokens_in_use += prompt_tokens
            self.prefix_queries += prompt_tokens
            self.prefix_hits += cached_tokens

    def prefix_hit_rate(self) -> float:
        return self.prefix_hits / self.prefix_queries if self.prefix_queries else 0.0

    def token_generated(self, gap_seconds: float | None) -> None:
        with self.lock:
            self.generation_tokens += 1
            self.kv_tokens_in_use += 1
            if gap_seconds is not None:
                self.token_gap.observe(gap_seconds)

    def first_token(self, seconds: float) -> None:
        with self.lock:
            self.ttft.observe(seconds)

    def finish_request(self, used_tokens: int, finish_reason: str, seconds: float) -> None:
        with self.lock:
            self.kv_tokens_in_use -= used_tokens
            self.finished[finish_reason] = self.finished.get(finish_reason, 0) + 1
            self.latency.observe(seconds)

    def kv_cache_usage(self) -> float:
        return min(1.0, self.kv_tokens_in_use / self.kv_cache_tokens)

    def render(self) -> str:
        with self.lock:
            return self._render()

    def _render(self) -> str:
        old_labels = f'model_name="{self.model_name}"'
        labels = f'engine="0",model_name="{self.model_name}"'
        lines: list[str] = []

        def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, str, float]]) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            for suffix, sample_labels, value in samples:
                lines.append(f"{name}{suffix}{{{sample_labels}}} {float(value)}")

        def histogram(name: str, help_text: str, data: Histogram) -> None:
            samples: list[tuple[str, str, float]] = [
                ("_bucket", f'{labels},le="{bound}"', count)
                for bound, count in zip(data.buckets, data.counts, strict=True)
            ]
            samples += [
                ("_bucket", f'{labels},le="+Inf"', data.count),
                ("_count", labels, data.count),
                ("_sum", labels, data.total),
            ]
            metric(name, "histogram", help_text, samples)

        metric(
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            [("", labels, self.running)],
        )
        metric(
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            [("", labels, self.waiting)],
        )
        usage = self.kv_cache_usage()
        metric(
            "vllm:gpu_cache_usage_perc",
            "gauge",
            "GPU KV-cache usage. 1 means 100 percent usage.",
            [("", old_labels, usage)],
        )
        metric(
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV-cache usage. 1 means 100 percent usage.",
            [("", labels, usage)],
        )
        metric(
            "vllm:prompt_tokens_total",
            "counter",
            "Number of prefill tokens processed.",
            [("", labels, self.prompt_tokens)],
        )
        metric(
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            [("", labels, self.generation_tokens)],
        )
        metric(
            "vllm:request_success_total",
            "counter",
            "Count of successfully processed requests.",
            [
                ("", f'{labels},finished_reason="{reason}"', count)
                for reason, count in sorted(self.finished.items())
            ],
        )
        for prefix in ("vllm:gpu_prefix_cache", "vllm:prefix_cache"):
            counter = f"{prefix}_queries"
            lines.append(f"# HELP {counter} Prefix cache queries, in terms of number of queried tokens.")
            lines.append(f"# TYPE {counter} counter")
            lines.append(f"{counter}_total{{{labels}}} {float(self.prefix_queries)}")
            counter = f"{prefix}_hits"
            lines.append(f"# HELP {counter} Prefix cache hits, in terms of number of cached tokens.")
            lines.append(f"# TYPE {counter} counter")
            lines.append(f"{counter}_total{{{labels}}} {float(self.prefix_hits)}")
        histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.ttft
        )
        histogram(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            self.token_gap,
        )
        histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", self.token_gap
        )
        histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", self.latency
        )
        return "\n".join(lines) + "\n"
