"""Read vLLM's Prometheus /metrics text into the few figures the panel shows, and rates between scrapes.

Names differ between vLLM versions: KV cache usage is vllm:gpu_cache_usage_perc up to 0.9 and
vllm:kv_cache_usage_perc after; time per output token is vllm:time_per_output_token_seconds, later
vllm:inter_token_latency_seconds. With data parallel every engine exports its own series (label
`engine`): counts and histograms are summed over engines, KV cache usage is the fullest engine's.
Quantiles are interpolated inside histogram buckets the way Prometheus' histogram_quantile does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
PROMPT_TOKENS = "vllm:prompt_tokens"
GENERATION_TOKENS = "vllm:generation_tokens"
TTFT = "vllm:time_to_first_token_seconds"
TPOT = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
# Prompt tokens looked up in the prefix cache and found there (the gpu_ spelling before vLLM 0.10).
PREFIX_QUERIES = ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries")
PREFIX_HITS = ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits")

Buckets = dict[float, float]  # upper bound ("le") -> cumulative count


class MetricsFormatError(ValueError):
    """The text is not Prometheus exposition format (e.g. an HTML error page on /metrics)."""


@dataclass(frozen=True)
class EngineMetrics:
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None  # 0..1
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    ttft_p50: float | None = None  # seconds, over the engine's lifetime
    ttft_p95: float | None = None
    tpot_p50: float | None = None
    tpot_p95: float | None = None
    ttft_buckets: Buckets = field(default_factory=dict)
    tpot_buckets: Buckets = field(default_factory=dict)
    prefix_cache_queries: float | None = None  # tokens, over the engine's lifetime
    prefix_cache_hits: float | None = None

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        """Hits over queries since the engine started; None before its first query or when not exported."""
        if not self.prefix_cache_queries or self.prefix_cache_hits is None:
            return None
        return self.prefix_cache_hits / self.prefix_cache_queries

    def as_dict(self) -> dict[str, float | None]:
        """The scalar figures only (buckets stay internal), ready for JSON."""
        return {
            "running": self.running,
            "waiting": self.waiting,
            "kv_cache_usage": self.kv_cache_usage,
            "prompt_tokens_total": self.prompt_tokens_total,
            "generation_tokens_total": self.generation_tokens_total,
            "ttft_p50": self.ttft_p50,
            "ttft_p95": self.ttft_p95,
            "tpot_p50": self.tpot_p50,
            "tpot_p95": self.tpot_p95,
            "prefix_cache_queries": self.prefix_cache_queries,
            "prefix_cache_hits": self.prefix_cache_hits,
            "prefix_cache_hit_rate": self.prefix_cache_hit_rate,
        }


@dataclass(frozen=True)
class Rates:
    """What happened between two scrapes."""

    seconds: float
    prompt_tokens_per_second: float | None
    generation_tokens_per_second: float | None
    ttft_p50: float | None  # quantiles of the requests in the window only
    ttft_p95: float | None
    ttft_p90: float | None  # what an autoscale target on TTFT reads (panel/deployments/autoscale)
    tpot_p50: float | None
    tpot_p95: float | None
    prefix_cache_hit_rate: float | None = None  # of the prompt tokens looked up in the window


def parse_metrics(text: str) -> EngineMetrics:
    """The figures from one /metrics scrape; a figure vLLM does not export is None."""
    gauges: dict[str, list[float]] = {}
    counters: dict[str, float] = {}
    histograms: dict[str, Buckets] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as error:
        raise MetricsFormatError(f"not Prometheus metrics text: {error}") from error
    for family in families:
        for sample in family.samples:
            if sample.name.endswith("_created") or math.isnan(sample.value):
                continue
            if family.type == "histogram":
                if sample.name == family.name + "_bucket":
                    bound = float(sample.labels["le"])
                    buckets = histograms.setdefault(family.name, {})
                    buckets[bound] = buckets.get(bound, 0.0) + sample.value
            elif family.type == "counter" or family.name.endswith("_total"):
                # A counter typed without its _total (as OpenMetrics writes it) parses as an untyped family.
                name = family.name.removesuffix("_total")
                counters[name] = counters.get(name, 0.0) + sample.value
            else:
                gauges.setdefault(family.name, []).append(sample.value)
    ttft = histograms.get(TTFT, {})
    tpot = _first_present(histograms, TPOT) or {}
    usage = _first_present(gauges, KV_CACHE_USAGE)
    return EngineMetrics(
        running=_sum(gauges.get(RUNNING)),
        waiting=_sum(gauges.get(WAITING)),
        kv_cache_usage=max(usage) if usage else None,
        prompt_tokens_total=counters.get(PROMPT_TOKENS),
        generation_tokens_total=counters.get(GENERATION_TOKENS),
        ttft_p50=histogram_quantile(0.5, ttft),
        ttft_p95=histogram_quantile(0.95, ttft),
        tpot_p50=histogram_quantile(0.5, tpot),
        tpot_p95=histogram_quantile(0.95, tpot),
        ttft_buckets=ttft,
        tpot_buckets=tpot,
        prefix_cache_queries=_counter(counters, PREFIX_QUERIES),
        prefix_cache_hits=_counter(counters, PREFIX_HITS),
    )


def rates(earlier: EngineMetrics, later: EngineMetrics, seconds: float) -> Rates:
    """Token rates and latency quantiles between two scrapes `seconds` apart.

    A counter that went down means vLLM restarted in between; the later value is then the increase.
    """
    if seconds <= 0:
        raise ValueError(f"the scrapes must be apart in time; got {seconds} seconds")
    ttft = _bucket_increase(earlier.ttft_buckets, later.ttft_buckets)
    tpot = _bucket_increase(earlier.tpot_buckets, later.tpot_buckets)
    return Rates(
        seconds=seconds,
        prompt_tokens_per_second=_per_second(earlier.prompt_tokens_total, later.prompt_tokens_total, seconds),
        generation_tokens_per_second=_per_second(
            earlier.generation_tokens_total, later.generation_tokens_total, seconds
        ),
        ttft_p50=histogram_quantile(0.5, ttft),
        ttft_p95=histogram_quantile(0.95, ttft),
        ttft_p90=histogram_quantile(0.9, ttft),
        tpot_p50=histogram_quantile(0.5, tpot),
        tpot_p95=histogram_quantile(0.95, tpot),
        prefix_cache_hit_rate=_window_hit_rate(earlier, later),
    )


def _window_hit_rate(earlier: EngineMetrics, later: EngineMetrics) -> float | None:
    """Hits over queries between two scrapes (the later counts alone after a restart); None without
    queries in between."""
    if later.prefix_cache_queries is None or later.prefix_cache_hits is None:
        return None
    queries, hits = later.prefix_cache_queries, later.prefix_cache_hits
    before_queries, before_hits = earlier.prefix_cache_queries or 0.0, earlier.prefix_cache_hits or 0.0
    if queries >= before_queries and hits >= before_hits:
        queries, hits = queries - before_queries, hits - before_hits
    return hits / queries if queries > 0 else None


def histogram_quantile(quantile: float, buckets: Buckets) -> float | None:
    """Prometheus' estimate: find the bucket holding the rank, interpolate linearly inside it.

    None when nothing was observed. A rank in the +Inf bucket returns the highest finite bound.
    """
    if not buckets:
        return None
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    if total <= 0:
        return None
    rank = quantile * total
    lower_bound, lower_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound


def _bucket_increase(earlier: Buckets, later: Buckets) -> Buckets:
    if not later:
        return {}
    restarted = any(later.get(bound, 0.0) < count for bound, count in earlier.items())
    if restarted:
        return dict(later)
    return {bound: count - earlier.get(bound, 0.0) for bound, count in later.items()}


def _per_second(earlier: float | None, later: float | None, seconds: float) -> float | None:
    if later is None:
        return None
    if earlier is None or later < earlier:
        return later / seconds if earlier is not None else None
    return (later - earlier) / seconds


def _first_present(found: dict, names: tuple[str, ...]):
    """The series under the first of `names` (newest vLLM spelling first) that the scrape has."""
    for name in names:
        if found.get(name):
            return found[name]
    return None


def _counter(counters: dict[str, float], names: tuple[str, ...]) -> float | None:
    """A counter under the first of `names` the scrape has (0 is a value, unlike _first_present's lists)."""
    return next((counters[name] for name in names if name in counters), None)


def _sum(values: list[float] | None) -> float | None:
    return sum(values) if values else None
