"""Agents' metric batches as the tests build them: one host sample and one NPU sample each."""

from datetime import timedelta

from workers.contracts import HostSample, MetricBatch, MetricSample, NpuSample, utcnow


def a_batch(node: str, seq: int, sent_ago_s: float = 0) -> MetricBatch:
    taken = utcnow() - timedelta(seconds=sent_ago_s)
    npu = NpuSample(npu_id=0, chip_id=0, health="OK", aicore_pct=float(seq), hbm_used_mb=1, hbm_total_mb=2)
    host = HostSample(cpu_pct=1, memory_used_mb=1, memory_total_mb=2, load1=0.1)
    return MetricBatch(
        node=node, samples=[MetricSample(time=taken, host=host, npus=[npu])], seq=seq, sent_at=taken
    )
