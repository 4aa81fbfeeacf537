"""What a model needs on the typical Ascend node (Atlas 800I A2: 8 × 910B, 64 GB HBM each)."""

from django.utils.translation import gettext as _

from workers.engine.memory import GIB
from workers.engine.plan import PlanInput, plan

TYPICAL_NODE = PlanInput(npu_memory_bytes=64 * GIB, npus_per_node=8, chip="910b")
TYPICAL_NPU_GB = 64


def fit_on_typical_node(facts: dict) -> dict | None:
    """{"fits", "npus", "tp", "text", "reason"} for the typical node; None when the facts are too thin."""
    if not facts:
        return None
    result = plan(facts, TYPICAL_NODE)
    if any(r.code == "facts_missing" for r in result.reasons):
        return None
    npus = result.tensor_parallel_size * result.data_parallel_size
    problem = next((r for r in result.reasons if r.level == "error"), None)
    if result.fits:
        text = _("needs %(npus)d × %(gb)d GB at TP %(tp)d") % {
            "npus": npus,
            "gb": TYPICAL_NPU_GB,
            "tp": result.tensor_parallel_size,
        }
    else:
        text = _("does not fit one node of 8 × %(gb)d GB") % {"gb": TYPICAL_NPU_GB}
    return {
        "fits": result.fits,
        "npus": npus,
        "tp": result.tensor_parallel_size,
        "text": text,
        "reason": problem.message if problem else "",
        "weights_gb_per_npu": round(result.weights_bytes_per_npu / GIB, 1),
    }
