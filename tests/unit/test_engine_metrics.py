"""vLLM /metrics parsing: both metric spellings, DP engines, histogram quantiles, rates between scrapes."""

import pytest

from workers.engine.running.metrics import (
    EngineMetrics,
    MetricsFormatError,
    histogram_quantile,
    parse_metrics,
    rates,
)

# As vLLM 0.8/0.9 exports it: one engine, label model_name, gpu_cache_usage_perc, time_per_output_token.
OLD_STYLE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="qwen2.5-7b"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="qwen2.5-7b"} 1.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="qwen2.5-7b"} 0.125
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="qwen2.5-7b"} 1200.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="qwen2.5-7b"} 5400.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="qwen2.5-7b"} 2.0
vllm:time_to_first_token_seconds_bucket{le="0.25",model_name="qwen2.5-7b"} 6.0
vllm:time_to_first_token_seconds_bucket{le="0.5",model_name="qwen2.5-7b"} 9.0
vllm:time_to_first_token_seconds_bucket{le="1.0",model_name="qwen2.5-7b"} 10.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="qwen2.5-7b"} 10.0
vllm:time_to_first_token_seconds_count{model_name="qwen2.5-7b"} 10.0
vllm:time_to_first_token_seconds_sum{model_name="qwen2.5-7b"} 2.4
# HELP vllm:time_per_output_token_seconds Histogram of time per output token in seconds.
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{le="0.025",model_name="qwen2.5-7b"} 100.0
vllm:time_per_output_token_seconds_bucket{le="0.05",model_name="qwen2.5-7b"} 500.0
vllm:time_per_output_token_seconds_bucket{le="0.075",model_name="qwen2.5-7b"} 540.0
vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="qwen2.5-7b"} 540.0
vllm:time_per_output_token_seconds_count{model_name="qwen2.5-7b"} 540.0
vllm:time_per_output_token_seconds_sum{model_name="qwen2.5-7b"} 20.1
"""


def new_style(prompt=(300.0, 500.0), ttft_buckets=((0.1, 1.0), (0.5, 4.0), (1.0, 4.0))):
    """As vLLM 0.10+ exports it with DP 2: label engine, kv_cache_usage_perc, inter_token_latency,
    _created samples and scientific notation."""
    lines = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{engine="0",model_name="deepseek-r1"} 2.0',
        'vllm:num_requests_running{engine="1",model_name="deepseek-r1"} 5.0',
        "# TYPE vllm:num_requests_waiting gauge",
        'vllm:num_requests_waiting{engine="0",model_name="deepseek-r1"} 0.0',
        'vllm:num_requests_waiting{engine="1",model_name="deepseek-r1"} 4.0',
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        'vllm:kv_cache_usage_perc{engine="0",model_name="deepseek-r1"} 0.25',
        'vllm:kv_cache_usage_perc{engine="1",model_name="deepseek-r1"} 0.5',
        "# TYPE vllm:prompt_tokens_total counter",
        f'vllm:prompt_tokens_total{{engine="0",model_name="deepseek-r1"}} {prompt[0]}',
        f'vllm:prompt_tokens_total{{engine="1",model_name="deepseek-r1"}} {prompt[1]}',
        'vllm:prompt_tokens_created{engine="0",model_name="deepseek-r1"} 1.7561234e+09',
        'vllm:prompt_tokens_created{engine="1",model_name="deepseek-r1"} 1.7561234e+09',
        "# TYPE vllm:generation_tokens_total counter",
        'vllm:generation_tokens_total{engine="0",model_name="deepseek-r1"} 1.5e+04',
        'vllm:generation_tokens_total{engine="1",model_name="deepseek-r1"} 5.0e+03',
        "# TYPE vllm:time_to_first_token_seconds histogram",
    ]
    name = "vllm:time_to_first_token_seconds"
    for engine in ("0", "1"):
        labels = f'engine="{engine}",model_name="deepseek-r1"'
        for bound, count in (*ttft_buckets, ("+Inf", ttft_buckets[-1][1])):
            lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {count}')
        lines.append(f"{name}_count{{{labels}}} {ttft_buckets[-1][1]}")
    lines += [
        "# TYPE vllm:inter_token_latency_seconds histogram",
        'vllm:inter_token_latency_seconds_bucket{engine="0",le="0.04",model_name="deepseek-r1"} 10.0',
        'vllm:inter_token_latency_seconds_bucket{engine="0",le="0.08",model_name="deepseek-r1"} 30.0',
        'vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="deepseek-r1"} 40.0',
        'vllm:inter_token_latency_seconds_count{engine="0",model_name="deepseek-r1"} 40.0',
    ]
    return "\n".join(lines) + "\n"


def test_it_reads_the_old_metric_names():
    metrics = parse_metrics(OLD_STYLE)
    assert metrics.running == 3
    assert metrics.waiting == 1
    assert metrics.kv_cache_usage == 0.125
    assert metrics.prompt_tokens_total == 1200
    assert metrics.generation_tokens_total == 5400
    # rank 5 of 10 lies in (0.1, 0.25]: 0.1 + 0.15 * (5 - 2) / (6 - 2)
    assert metrics.ttft_p50 == pytest.approx(0.2125)
    # rank 9.5 lies in (0.5, 1.0]: 0.5 + 0.5 * 0.5 / 1
    assert metrics.ttft_p95 == pytest.approx(0.75)
    # rank 270 of 540 lies in (0.025, 0.05]
    assert metrics.tpot_p50 == pytest.approx(0.025 + 0.025 * 170 / 400)


def test_it_sums_dp_engines_and_reports_the_fullest_kv_cache():
    metrics = parse_metrics(new_style())
    assert metrics.running == 7
    assert metrics.waiting == 4
    assert metrics.kv_cache_usage == 0.5
    assert metrics.prompt_tokens_total == 800  # _created samples are not tokens
    assert metrics.generation_tokens_total == 20000
    assert metrics.ttft_buckets[0.5] == 8
    assert metrics.tpot_p50 == pytest.approx(0.04 + 0.04 * 10 / 20)


def test_it_leaves_figures_vllm_did_not_export_empty():
    metrics = parse_metrics(
        '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 0\n'
    )
    assert metrics.running == 0
    assert metrics.kv_cache_usage is None
    assert metrics.ttft_p50 is None
    assert metrics.as_dict()["prompt_tokens_total"] is None


def test_it_refuses_text_that_is_not_metrics():
    with pytest.raises(MetricsFormatError):
        parse_metrics("<html><body>502 Bad Gateway</body></html>\n")


def test_quantiles_in_the_inf_bucket_return_the_highest_finite_bound():
    assert histogram_quantile(0.99, {0.5: 1.0, 1.0: 2.0, float("inf"): 10.0}) == 1.0
    assert histogram_quantile(0.5, {0.5: 0.0, float("inf"): 0.0}) is None


def test_rates_between_two_scrapes():
    earlier = parse_metrics(
        new_style(prompt=(300.0, 500.0), ttft_buckets=((0.1, 1.0), (0.5, 4.0), (1.0, 4.0)))
    )
    later = parse_metrics(new_style(prompt=(900.0, 700.0), ttft_buckets=((0.1, 1.0), (0.5, 4.0), (1.0, 8.0))))
    window = rates(earlier, later, seconds=10)
    assert window.prompt_tokens_per_second == 80  # (1600 - 800) / 10
    assert window.generation_tokens_per_second == 0
    # Only the 8 new requests count, all of them slower than 0.5 s.
    assert 0.5 < window.ttft_p50 <= 1.0
    assert window.tpot_p50 is None  # no token latencies observed in the window


def test_rates_treat_a_counter_that_went_down_as_a_restart():
    earlier = EngineMetrics(prompt_tokens_total=5000, ttft_buckets={1.0: 50, float("inf"): 50})
    later = EngineMetrics(prompt_tokens_total=300, ttft_buckets={1.0: 3, float("inf"): 4})
    window = rates(earlier, later, seconds=30)
    assert window.prompt_tokens_per_second == 10
    assert window.ttft_p95 == 1.0


def test_rates_need_time_between_scrapes():
    with pytest.raises(ValueError, match="apart in time"):
        rates(EngineMetrics(), EngineMetrics(), seconds=0)


def prefix_counters(queries: float, hits: float, old_names: bool = False) -> str:
    prefix = "vllm:gpu_prefix_cache" if old_names else "vllm:prefix_cache"
    lines = []
    for name, value in (("queries", queries), ("hits", hits)):
        lines += [f"# TYPE {prefix}_{name}_total counter"]
        lines += [f'{prefix}_{name}_total{{engine="{e}",model_name="m"}} {value / 2}' for e in (0, 1)]
    return "\n".join(lines) + "\n"


def test_prefix_cache_hits_and_queries_are_summed_over_engines_in_either_spelling():
    metrics = parse_metrics(prefix_counters(1000.0, 250.0))
    assert (metrics.prefix_cache_queries, metrics.prefix_cache_hits) == (1000, 250)
    assert metrics.as_dict()["prefix_cache_hit_rate"] == 0.25
    assert parse_metrics(prefix_counters(80.0, 60.0, old_names=True)).prefix_cache_hit_rate == 0.75
    fresh = parse_metrics(prefix_counters(0.0, 0.0))
    assert (fresh.prefix_cache_queries, fresh.prefix_cache_hit_rate) == (0, None)  # 0 is a value, no rate
    assert parse_metrics(OLD_STYLE).as_dict()["prefix_cache_queries"] is None


def test_the_windows_hit_rate_counts_the_tokens_looked_up_in_it():
    window = rates(parse_metrics(prefix_counters(1000, 100)), parse_metrics(prefix_counters(1400, 400)), 5)
    assert window.prefix_cache_hit_rate == 0.75  # 300 of 400
    restarted = rates(parse_metrics(prefix_counters(1000, 100)), parse_metrics(prefix_counters(200, 50)), 5)
    assert restarted.prefix_cache_hit_rate == 0.25
    idle = rates(parse_metrics(prefix_counters(1000, 100)), parse_metrics(prefix_counters(1000, 100)), 5)
    assert idle.prefix_cache_hit_rate is None


def test_a_counter_typed_without_its_total_suffix_still_counts():
    text = '# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total{engine="0"} 7.0\n'
    assert parse_metrics(text).prefix_cache_hits == 7
