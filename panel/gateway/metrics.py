"""The gateway on /metrics: requests and tokens per model and key, and time to first token per model.

Every web process adds to the same Redis hashes (panel.gateway.usage.finish), so one scrape of any process
shows the whole panel's counters.
"""

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

from panel.gateway import store
from panel.gateway.usage import TTFT_BUCKETS


def _split(field: str) -> list[str]:
    return field.split(store.FIELD_SEPARATOR)


def collect():
    client = store.client()
    with client.pipeline(transaction=False) as pipeline:
        pipeline.hgetall(store.METRIC_REQUESTS)
        pipeline.hgetall(store.METRIC_TOKENS)
        pipeline.hgetall(store.METRIC_TTFT)
        requests, tokens, ttft = pipeline.execute()

    counted = CounterMetricFamily(
        "panel_gateway_requests", "requests through the /v1 gateway", labels=["model", "key", "status"]
    )
    for field, value in sorted(requests.items()):
        counted.add_metric(_split(field), int(value))
    yield counted

    used = CounterMetricFamily(
        "panel_gateway_tokens",
        "tokens of gateway requests (the engines' usage)",
        labels=["model", "key", "kind"],
    )
    for field, value in sorted(tokens.items()):
        used.add_metric(_split(field), int(value))
    yield used

    histogram = HistogramMetricFamily(
        "panel_gateway_ttft_seconds", "time to first token of streamed gateway requests", labels=["model"]
    )
    per_model: dict[str, dict[str, float]] = {}
    for field, value in ttft.items():
        model, bucket = field.rsplit(store.FIELD_SEPARATOR, 1)
        per_model.setdefault(model, {})[bucket] = float(value)
    for model, counts in sorted(per_model.items()):
        running = 0.0
        buckets = []
        for bound in TTFT_BUCKETS:
            running += counts.get(f"{bound:g}", 0)
            buckets.append((f"{bound:g}", running))
        running += counts.get("+Inf", 0)
        buckets.append(("+Inf", running))
        histogram.add_metric([model], buckets, sum_value=counts.get("sum", 0.0))
    yield histogram
