"""Minute statistics from ring-buffer samples: mean and max per NPU and per host figure. Pure functions."""

from collections import defaultdict

# Positions in a compact sample (panel.monitoring.metrics.store.compact).
HOST_FIELDS = {"cpu": 0, "memory_used": 1, "load1": 3}
NPU_FIELDS = {"util": 2, "hbm_used": 3, "power": 4, "temp": 5, "memory_used": 6}


def minute_of(epoch: float) -> int:
    return int(epoch // 60) * 60


def mean_and_max(values: list) -> tuple[float | None, float | None]:
    """Over the figures that were read; None when none was (npu-smi prints NA for some)."""
    present = [v for v in values if v is not None]
    if not present:
        return None, None
    return round(sum(present) / len(present), 3), max(present)


def minute_stats(samples: list[dict]) -> dict[int, dict]:
    """Compact samples of one node grouped by minute: {minute epoch: {"samples": n, "host": {field: (mean,
    max)}, "npus": {(npu, chip): {field: (mean, max)}}, "counts": {(npu, chip): n}}}."""
    grouped: dict[int, list[dict]] = defaultdict(list)
    for sample in samples:
        grouped[minute_of(sample["t"])].append(sample)
    stats = {}
    for minute, in_minute in sorted(grouped.items()):
        host = {name: mean_and_max([s["h"][at] for s in in_minute]) for name, at in HOST_FIELDS.items()}
        rows: dict[tuple[int, int], list[list]] = defaultdict(list)
        for sample in in_minute:
            for row in sample["n"]:
                rows[(row[0], row[1])].append(row)
        npus = {
            chip: {name: mean_and_max([row[at] for row in chip_rows]) for name, at in NPU_FIELDS.items()}
            for chip, chip_rows in rows.items()
        }
        stats[minute] = {
            "samples": len(in_minute),
            "host": host,
            "npus": npus,
            "counts": {chip: len(chip_rows) for chip, chip_rows in rows.items()},
        }
    return stats
