"""A large fleet without hosts: metric batches for N nodes × 8 NPUs, sent every second the way agents send
them (the metrics inbox, workers.metrics_inbox), so the panel's real ingest, alerts, fleet
summary and websocket fan-out carry them to the dashboard.

    python -m tests.browser.fake_fleet --nodes 64 --seconds 120      # with the panel's REDIS_URL set

The nodes must exist in the panel first, and their credentials be at hand: `manage.py ensure_demo_nodes
fleet-01 ... fleet-64` then `manage.py agent_credential --dir KEYS fleet-01 ...` and `--keys KEYS`
(`node_names(64)` gives the names). Figures drift smoothly from a fixed seed, so screenshots are
comparable; a few chips are Warning / Alarm and a few hold a deployment, as in a working fleet.
Like an agent, this imports nothing from Django or panel/.
"""

import argparse
import math
import random
import time
from pathlib import Path

from workers import metrics_inbox
from workers.contracts import HostSample, MetricBatch, MetricSample, NpuSample, utcnow
from workers.identity import use_keys

NPUS_PER_NODE = 8
HBM_TOTAL_MB = 65536
DEPLOYMENTS = ("qwen2.5-72b-instruct", "deepseek-r1-distill-32b", "qwen3-8b", None, None)


def node_names(count: int) -> list[str]:
    return [f"fleet-{n:02d}" for n in range(1, count + 1)]


class FakeNode:
    def __init__(self, name: str, rng: random.Random):
        self.name = name
        self.rng = rng
        self.deployment = rng.choice(DEPLOYMENTS)
        self.base_util = rng.uniform(55, 92) if self.deployment else rng.uniform(0, 4)
        self.phase = rng.uniform(0, math.tau)
        self.health = ["OK"] * NPUS_PER_NODE
        roll = rng.random()
        if roll < 0.06:
            self.health[rng.randrange(NPUS_PER_NODE)] = "Alarm"
        elif roll < 0.15:
            self.health[rng.randrange(NPUS_PER_NODE)] = "Warning"
        self.seq = 0

    def sample(self, tick: int) -> MetricSample:
        npus = []
        for npu_id in range(NPUS_PER_NODE):
            wave = math.sin(tick / 9 + self.phase + npu_id / 3)
            util = max(0.0, min(100.0, self.base_util + 6 * wave + self.rng.uniform(-3, 3)))
            busy = self.deployment is not None
            hbm_used = (52000 if busy else 3300) + (1200 * wave if busy else 0)
            npus.append(
                NpuSample(
                    npu_id=npu_id,
                    chip_id=0,
                    logic_id=npu_id,
                    name="910B3",
                    health=self.health[npu_id],
                    aicore_pct=round(util, 1),
                    power_w=round(92 + util * 2.6 + self.rng.uniform(-2, 2), 1),
                    temp_c=round(42 + util * 0.22 + self.rng.uniform(-0.5, 0.5), 0),
                    hbm_used_mb=round(hbm_used),
                    hbm_total_mb=HBM_TOTAL_MB,
                    processes=[{"pid": 4100 + npu_id, "name": "python3", "memory_mb": 48000}] if busy else [],
                )
            )
        host = HostSample(
            cpu_pct=round(8 + self.base_util / 5 + self.rng.uniform(-2, 2), 1),
            memory_used_mb=180_000 + 2000 * math.sin(tick / 30),
            memory_total_mb=1_048_576,
            load1=round(3 + self.base_util / 10, 2),
        )
        return MetricSample(time=utcnow(), host=host, npus=npus)

    def batch(self, tick: int) -> MetricBatch:
        self.seq += 1
        return MetricBatch(node=self.name, samples=[self.sample(tick)], seq=self.seq, sent_at=utcnow())


def run(count: int, seconds: float, seed: int = 7, keys: Path | None = None) -> None:
    if keys is not None:  # each node's credential, as `manage.py agent_credential --dir` wrote them
        use_keys({name: (keys / f"{name}.key").read_bytes() for name in node_names(count)})
    rng = random.Random(seed)
    fleet = [FakeNode(name, rng) for name in node_names(count)]
    started = time.monotonic()
    tick = 0
    while time.monotonic() - started < seconds:
        for node in fleet:
            metrics_inbox.push(node.batch(tick))
        tick += 1
        time.sleep(max(0.0, started + tick - time.monotonic()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--keys", type=Path, help="folder of <node>.key credentials (manage.py agent_credential)"
    )
    args = parser.parse_args()
    run(args.nodes, args.seconds, args.seed, args.keys)


if __name__ == "__main__":
    main()
