"""The gateway on /metrics: requests and tokens per model and key, and time to first token per model.

Every web process adds to the same Redis hashes (panel.gateway.accounting.usage.finish), so one scrape of any
process shows the whole panel's counters.
"""

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

from panel.gateway import store
from panel.gateway.accounting.usage import TTFT_BUCKETS


def _labels(field: str, count: int) -> list[str] | None:
    """The label values a hash field holds; None for one that does not split into `count` (a key named with
    the separator in it), which is left out rather than break the whole scrape."""
    values = field.split(store.FIELD_SEPARATOR)
    return values if len(values) == count else None


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
        if labels := _labels(field, 3):
            counted.add_metric(labels, int(value))
    yield counted

    used = CounterMetricFamily(
        "panel_gateway_tokens",
        "tokens of gateway requests (the engines' usage)",
        labels=["model", "key", "kind"],
    )
    for field, value in sorted(tokens.items()):
        if labels := _labels(field, 3):
            used.add_metric(labels, int(value))
    yield used

    histogram = HistogramMetricFamily(
        "panel_gateway_ttft_seconds", "time to first token of streamed gateway requests", labels=["model"]
    )
    per_model: dict[str, dict[str, float]] = {}
    for field, value in ttft.items():
        if not (labels := _labels(field, 2)):
            continue
        model, bucket = labels
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
