"""The planner's reasons: one machine code per outcome, each with a translatable sentence.

The panel shows `message` in English or translates `template` (marked with gettext_noop) and fills in
`params` itself, so numbers keep their locale formatting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workers.i18n import gettext_noop as _

TEMPLATES = {
    "facts_missing": _(
        "The model description lacks %(fields)s, so its memory cannot be planned; re-inspect the model."
    ),
    "quantized_checkpoint": _(
        "The weights are already quantized (%(label)s); they are served with --quantization ascend."
    ),
    "quantization_unsupported": _(
        "The weights are quantized as %(label)s, which vllm-ascend may not load; "
        "msModelSlim W8A8 weights made from the original model are the supported route."
    ),
    "max_model_len_exceeds_model": _(
        "max-model-len %(asked)d is longer than the model's %(longest)d positions; vLLM refuses that."
    ),
    "bf16_unsupported_on_310p": _(
        "Atlas 300I (310P) NPUs do not support bfloat16; the model is served in float16."
    ),
    "dtype_unsupported_on_310p": _(
        "Atlas 300I (310P) NPUs cannot compute in %(dtype)s; the model is served in float16."
    ),
    "eager_required_on_310p": _("310P NPUs run vLLM in eager mode (no graph mode)."),
    "mla_graph_mode_heads": _(
        "MLA graph mode on Ascend needs 32, 64 or 128 attention heads per NPU; TP %(tp)d leaves "
        "%(heads)d, so the model runs in eager mode (slower decoding)."
    ),
    "tp_does_not_divide_heads": _(
        "TP %(tp)d does not divide the model's %(heads)d attention heads; choose a TP that does."
    ),
    "tp_does_not_divide_kv_heads": _(
        "TP %(tp)d neither divides nor is a multiple of the model's %(kv_heads)d KV heads."
    ),
    "tp_exceeds_node": _(
        "TP %(tp)d is more than the %(per_node)d NPUs of one node; TP must stay inside a node."
    ),
    "not_enough_npus": _("TP %(tp)d x DP %(dp)d needs %(needed)d NPUs; %(available)d are available."),
    "weights_do_not_fit": _(
        "%(weights)s GiB of %(label)s weights do not fit %(npus)d x %(npu_gib)s GiB at %(util).2f: "
        "TP %(tp)d puts %(per_npu)s GiB on each NPU, of the %(allowed)s GiB vLLM may use there."
    ),
    "dense_needs_pipeline": _(
        "A dense model that does not fit one node would need pipeline parallel, which is not planned."
    ),
    "moe_sizes_unknown": _(
        "The expert sizes of this MoE model are unknown, so multi-node expert parallel was not planned."
    ),
    "needs_more_nodes": _(
        "%(weights)s GiB of %(label)s weights do not fit %(have)d node(s) of %(per_node)d x %(npu_gib)s GiB "
        "at %(util).2f; with expert parallel they fit %(nodes)d nodes as TP %(tp)d x DP %(dp)d, "
        "leaving %(kv)s GiB per NPU for about %(tokens)d tokens of KV cache."
    ),
    "fits_as_w8a8": _(
        "As W8A8 (%(weights)s GiB) they fit with TP %(tp)d x DP %(dp)d on %(nodes)d node(s), leaving "
        "%(kv)s GiB per NPU for about %(tokens)d tokens of KV cache; quantize with msModelSlim."
    ),
    "kv_too_small": _(
        "The weights fit with TP %(tp)d, but the %(kv)s GiB left per NPU hold %(tokens)d tokens of KV "
        "cache, fewer than one %(max_len)d-token sequence; lower max-model-len to %(tokens)d or add NPUs."
    ),
    "plan": _(
        "TP %(tp)d x DP %(dp)d on %(nodes)d node(s): %(weights)s GiB of %(label)s weights and %(kv)s GiB "
        "of KV cache per NPU, about %(tokens)d tokens or %(seqs)d sequences of %(max_len)d per engine."
    ),
    "expert_parallel": _(
        "Routed experts are spread over all %(world)d NPUs (expert parallel); attention runs per DP rank."
    ),
    "npus_left_idle": _("%(idle)d NPUs stay free; more DP ranks or another model can use them."),
}

LEVELS = ("error", "warning", "info")


@dataclass(frozen=True)
class Reason:
    """Why the plan is what it is. `level` is "error" (it will not run), "warning" (it runs, but not
    as asked) or "info"."""

    code: str
    level: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def template(self) -> str:
        return TEMPLATES[self.code]

    @property
    def message(self) -> str:
        return self.template % self.params

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "level": self.level, "message": self.message, "params": self.params}


def reason(code: str, level: str, **params: Any) -> Reason:
    if code not in TEMPLATES or level not in LEVELS:
        raise ValueError(f"unknown reason code {code!r} or level {level!r}")
    return Reason(code, level, params)
