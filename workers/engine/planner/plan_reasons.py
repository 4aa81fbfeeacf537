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
    "moe_layout": _(
        "MoE model over %(world)d NPUs: DP %(dp)d x TP %(tp)d with expert parallel keeps %(heads)d attention "
        "heads per NPU and spreads the routed experts over every NPU, as vllm-ascend's DeepSeek recipes do."
    ),
    "mtp_draft": _(
        "MTP speculative decoding (%(tokens)d draft token(s)) runs %(layers)d extra layer(s): "
        "%(weights)s GiB more weights per NPU, and their KV cache is counted in the tokens."
    ),
    "mtp_unsupported": _(
        "This model has no MTP layers (num_nextn_predict_layers in its config), so MTP speculative decoding "
        "cannot run; set the MTP draft tokens to 0."
    ),
    "eplb_on": _(
        "Dynamic expert load balancing (EPLB) is on, as vllm-ascend %(version)s recommends: %(redundant)d "
        "redundant experts (one per EP rank) take %(per_npu)s GiB per NPU."
    ),
    "eplb_no_room": _(
        "EPLB's %(redundant)d redundant experts would need %(per_npu)s GiB per NPU that the KV cache cannot "
        "spare, so EPLB stays off."
    ),
    "eplb_unsupported_weights": _(
        "vllm-ascend's EPLB does not support %(label)s weights, so EPLB stays off."
    ),
    "hccl_buffers": _(
        "HCCL holds %(count)d communicator(s) per NPU at 2 x HCCL_BUFFSIZE (%(mb)d MB) each: "
        "%(size)s GiB per NPU, counted in the reserve."
    ),
    "decode_graph_mode": _(
        "DeepSeek runs graph mode as %(mode)s on vllm-ascend %(version)s (--compilation-config), as its "
        "tutorials do."
    ),
    # What would fit (workers.engine.planner.plan_proposals) and the prefill/decode split
    # (workers.engine.planner.plan_pd).
    "proposal_here": _(
        "Fits %(nodes)d node(s) of %(per_node)d NPUs like these (%(npus)d NPUs) as TP %(tp)d x DP %(dp)d x "
        "EP %(ep)d with %(label)s weights: %(weights)s GiB of weights and %(kv)s GiB of KV cache per NPU, "
        "about %(tokens)d tokens per engine."
    ),
    "proposal_hardware": _(
        "Fits %(nodes)d x %(hardware)s (%(npus)d NPUs) as TP %(tp)d x DP %(dp)d x EP %(ep)d with %(label)s "
        "weights: %(weights)s GiB of weights and %(kv)s GiB of KV cache per NPU, about %(tokens)d tokens "
        "per engine."
    ),
    "pd_estimate": _(
        "Estimated per NPU: prefill %(prefill)d tokens/s, decode %(decode)d tokens/s at %(batch)d "
        "sequences per engine within a %(tpot)d ms TPOT; a request of %(prompt)d prompt and %(output)d "
        "output tokens spends %(share)d%% of its NPU time in prefill."
    ),
    "pd_split": _(
        "Disaggregate as %(prefill)d prefill (TP %(p_tp)d x DP %(p_dp)d x EP %(p_ep)d, %(p_npus)d NPUs each) "
        "and %(decode)d decode (TP %(d_tp)d x DP %(d_dp)d x EP %(d_ep)d, %(d_npus)d NPUs each) of the "
        "%(npus)d NPUs: about %(rate).1f requests/s, the slower pool at %(balance)d%% of the faster one's "
        "rate."
    ),
    "pd_not_worth_short_prompts": _(
        "A prompt of %(prompt)d tokens prefills in about %(prefill_ms)d ms on one instance, against a "
        "%(tpot)d ms decode step: chunked prefill hides it from decoding, so plain replicas (with prefix "
        "routing) serve as well without the KV transfer."
    ),
    "pd_tpot_missed": _(
        "Even one sequence decodes at about %(step)d ms a token on this layout, slower than the %(tpot)d ms "
        "TPOT: each step reads %(weights)s GiB of weights per NPU. More NPUs per instance or W8A8 weights "
        "shorten it."
    ),
    "pd_not_worth_one_node": _(
        "All %(npus)d NPUs are on one node: split between prefill and decode, each role gets a part of one "
        "node, and plain replicas of the same size serve about as many requests without the KV transfer."
    ),
    "pd_not_worth_small_model": _(
        "The model fits one NPU (%(weights)s GiB of %(label)s weights): each replica prefills and decodes "
        "on its own NPU, and handing the KV cache between NPUs would cost more than it saves."
    ),
    "pd_no_room": _("One prefill and one decode instance need %(needed)d NPUs; %(npus)d are on offer."),
    "pd_no_chip_figures": _(
        "No compute and bandwidth figures are known for the %(chip)s, so no prefill/decode split is proposed."
    ),
    "pd_eplb_prefill": _(
        "The prefill instances run EPLB with %(redundant)d redundant experts, as this vllm-ascend recommends."
    ),
    "pd_eplb_decode": _(
        "The decode instances run EPLB with %(redundant)d redundant experts, as this vllm-ascend recommends."
    ),
    "pd_sanity_anchor": _(
        "For scale: Huawei reports 6,688 prefill and 1,943 decode tokens/s per NPU for DeepSeek-R1 (INT8) on "
        "CloudMatrix384, a 910C NPU being two of the dies counted here; the estimate is a roofline, not a "
        "measurement."
    ),
    # CPU binding: a cause, then what the panel does.
    "cpu_binding_engine": _(
        "vllm-ascend %(version)s binds its own CPUs (additional_config.enable_cpu_binding): per NPU it "
        "pins the worker, ACL and release threads and the NPU's interrupts, migrates memory pages with "
        "numactl and stops irqbalance while it serves. The panel starts it without numactl, which would "
        "confine it to one NUMA node and leave its binder too few CPUs (it needs %(need)d per NPU; this "
        "host has %(have)s)."
    ),
    "cpu_binding_user_on": _("The extra flags turn vllm-ascend's own CPU binding on."),
    "cpu_binding_user_off": _("The extra flags turn vllm-ascend's own CPU binding off."),
    "cpu_binding_old": _("vllm-ascend %(version)s does not bind CPUs unless told to."),
    "cpu_binding_unknown": _("The node's vllm-ascend version is not known."),
    "cpu_binding_few_cpus": _(
        "vllm-ascend %(version)s would bind its own CPUs, but it needs %(need)d CPUs per NPU and this host "
        "has %(have)d."
    ),
    "cpu_binding_not_arm": _("vllm-ascend binds CPUs only on ARM hosts; this one is %(arch)s."),
    "cpu_binding_numactl": _(
        "The panel binds the engine to NUMA node %(numa)d with numactl (--cpunodebind, --membind) and sets "
        "enable_cpu_binding to false, so only one binder acts."
    ),
    "cpu_binding_unbound": _(
        "The chosen NPUs sit on several NUMA nodes, so numactl cannot keep the engine next to all of them; "
        "nothing binds it (enable_cpu_binding false)."
    ),
    "recipe_env": _("%(name)s=%(value)s (%(recipe)s): %(why)s"),
    "recipe_env_overridden": _("%(name)s=%(value)s as you set it (the %(recipe)s recipe gives %(default)s)."),
    "recipe_note": _("%(recipe)s: %(why)s"),
    "env_user": _("%(name)s=%(value)s as you set it."),
    # The installed stack against the launch (workers.engine.launch.launch_matrix).
    "flag_removed": _("vLLM %(vllm)s no longer accepts %(flag)s (gone since %(until)s); use %(use)s."),
    "flag_too_new": _("vLLM %(vllm)s does not accept %(flag)s yet (it arrived in %(since)s); use %(use)s."),
    "config_key_removed": _(
        "vllm-ascend %(version)s ignores additional_config.%(key)s (gone since %(until)s); on "
        "%(version)s use %(use)s."
    ),
    "config_key_too_new": _(
        "vllm-ascend %(version)s ignores additional_config.%(key)s (it arrived in %(since)s); on %(version)s "
        "use %(use)s."
    ),
    "env_removed": _(
        "vllm-ascend %(version)s no longer reads %(env)s (gone since %(until)s); on %(version)s use %(use)s."
    ),
    "env_moved_to_config": _(
        "vllm-ascend %(version)s reads %(env)s only while it moves to additional_config; on %(version)s use "
        '--additional-config {"%(key)s": %(value)s}.'
    ),
    "graph_mode_too_new": _(
        "vllm-ascend %(version)s has no %(mode)s graph mode (it arrived in %(since)s); use PIECEWISE or "
        "leave cudagraph_mode out."
    ),
    "graph_mode_needs_stack": _(
        "%(mode)s graph mode needs HDK %(driver)s and CANN %(cann)s or newer; this node has HDK "
        "%(have_driver)s and CANN %(have_cann)s, so graph capture may fail (207008) or fall back to "
        "PIECEWISE. Upgrade the "
        'driver and CANN, or set --compilation-config {"cudagraph_mode": "FULL_DECODE_ONLY"}.'
    ),
    "launch_unchecked": _(
        "The node's vLLM version is not known, so extra flags and settings were not checked against it; run "
        "the inventory on the node."
    ),
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
