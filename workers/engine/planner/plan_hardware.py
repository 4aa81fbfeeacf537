"""The Ascend node shapes the planner proposes, and each chip's figures for its throughput estimates.

An "NPU" here is what npu-smi and the inventory count as one device (one logic id): a 910B, one die of an
A3's 910C, one chip of a 300I Duo card. Memory is what npu-smi reports for it, in binary units as the rest of
the planner; compute and bandwidth are the published peak figures, which the estimates scale down by an
efficiency (workers.engine.planner.plan_throughput).

Sources, one per figure family (the figures are published peaks, not measurements; where sources disagree
the lower common figure is used):
- A3 (Atlas 800I A3, 910C): "Serving Large Language Models on Huawei CloudMatrix384" (arXiv 2506.12708)
  puts a 910C at two dies, 128 GB of HBM and about 3.2 TB/s; its compute efficiency table divides the
  per-NPU throughputs by a peak of about 1,500 INT8 TOPS (6,688 / 4.45), twice the about 752 dense BF16
  TFLOPS. Per die: 64 GiB, 1.6 TB/s, 376 BF16 TFLOPS, 752 INT8 TOPS. An Atlas 800I A3 holds 8 such NPUs,
  16 dies (Huawei MindCluster's affinity guide: "eight HiAM modules" of two processors).
- A2 (Atlas 800I A2, 910B): 8 NPUs of 64 GiB (npu-smi shows 65536 MB). The 910C is two 910B dies, so a
  910B is taken at a 910C die's 1.6 TB/s; its FP16 peak is quoted from 280 (910B4) to 376 TFLOPS (910B1);
  313 (910B3) is used. The DaVinci cube does 8,192 INT8 MACs per 4,096 FP16 MACs (Hot Chips 31), so INT8 is
  twice FP16 on every chip here.
- 300I Duo (Atlas 300I Duo, 310P3): a card of two chips with 96 GB of LPDDR4X at 408 GB/s and 280 INT8
  TOPS (Huawei's product page, as reported with the card's teardown by Gamers Nexus and ComputerBase);
  per chip 204 GB/s, 140 INT8 TOPS, 70 FP16 TFLOPS; npu-smi reports 44,280 MB per chip. A server of this
  kind takes 4 cards, 8 chips.
"""

from __future__ import annotations

from dataclasses import dataclass

from workers.engine.planner.memory import GIB

MIB = 1024**2
TERA = 10**12


@dataclass(frozen=True)
class Hardware:
    id: str  # "a2" | "a3" | "300i-duo": what proposals, recipes and the catalog search name
    title: str
    chip: str  # the planner's chip (workers.engine.planner.plan_types.CHIPS)
    npus_per_node: int
    npu_memory_bytes: int
    flops_16bit: float  # dense FP16 / BF16 peak per NPU, FLOP/s
    ops_int8: float  # dense INT8 peak per NPU, OP/s (W8A8 matmuls)
    memory_bandwidth: float  # bytes/s per NPU

    def peak_for(self, weights_label: str) -> float:
        """The peak a linear layer runs at with these weights: INT8 for W8A8 / W4A8, else 16-bit."""
        return self.ops_int8 if weights_label.upper().startswith("W") else self.flops_16bit


HARDWARE = {
    "a2": Hardware(
        "a2",
        "Atlas 800I A2 (8 × 910B, 64 GiB)",
        "910b",
        8,
        64 * GIB,
        313 * TERA,
        626 * TERA,
        1.6 * TERA,
    ),
    "a3": Hardware(
        "a3",
        "Atlas 800I A3 (16 × 910C die, 64 GiB)",
        "a3",
        16,
        64 * GIB,
        376 * TERA,
        752 * TERA,
        1.6 * TERA,
    ),
    "300i-duo": Hardware(
        "300i-duo",
        "Atlas 300I Duo × 4 (8 × 310P3, 43 GiB)",
        "310p",
        8,
        44280 * MIB,
        70 * TERA,
        140 * TERA,
        0.204 * TERA,
    ),
}

# The chip figures when only the chip is known (the NPUs on offer, not a named shape).
BY_CHIP = {hardware.chip: hardware for hardware in HARDWARE.values()}


def for_chip(chip: str) -> Hardware | None:
    return BY_CHIP.get(chip)
