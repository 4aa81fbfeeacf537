"""One engine of a disaggregated deployment (docs/serving-plane.md §1), planned as apply, scale and the
rolling update need it: its spec (`member_spec`: the role's placement and engine over the top-level
fields), its plan in place of its row or as a new row (`plan_engine`), its role's --kv-transfer-config
from the launch matrix row of the node's version (`with_kv_transfer`), and the row given all of it
(`take_engine_plan`).

Names: prefill engine i is `<name>` (i = 1) or `<name>-r<i>`, as plain replicas are; decode engine j is
`<name>-d<j>`. A surge engine of a rolling update takes the next index of its role, above every row of it.
"""

from __future__ import annotations

import re
from typing import Any

from django.utils.translation import gettext as _

from panel.core.domain.choices import DeploymentRole
from panel.core.domain.errors import InvalidInput
from panel.deployments import services
from panel.deployments.launch.launch_tuning import node_stack
from panel.deployments.models import Deployment
from panel.deployments.placement.planning import DeploymentPlan
from panel.deployments.rollouts import replicas
from panel.deployments.spec.roles_spec import ROLES, role_member_name, role_rows
from panel.deployments.spec.spec_plan import build_request, flat_errors, plan_for, refuse
from panel.operations.texts import agent_text
from workers.engine.launch.command import LaunchSpecError
from workers.engine.launch.kv_transfer import KVSplitError, KVTransferError, render_kv_transfer
from workers.i18n import message_of

# The key of a rollout's spec that carries each role's (TP, DP) every engine's KV config names.
PARALLEL = "kv_parallel"


def member_index(primary_name: str, row_name: str, role: str) -> int:
    """The row's index in its role (1 for the primary's own); 0 for a name that is not of that role."""
    if role != DeploymentRole.DECODE:
        return replicas.index_of(primary_name, row_name)
    found = re.fullmatch(re.escape(primary_name) + r"-d(\d+)", row_name)
    return int(found.group(1)) if found else 0


def next_index(primary: Deployment, role: str) -> int:
    """An index of `role` above every row of it (rows still stopping after a delete included)."""
    names = [primary.name, *primary.replicas.values_list("name", flat=True)]
    wanted = int((primary.roles_wanted or {}).get(role) or 0)
    return max([wanted, *(member_index(primary.name, name, role) for name in names)]) + 1


def member_spec(spec: dict[str, Any], role: str, index: int) -> dict[str, Any]:
    """The plain spec of engine `index` of `role`: the role's placement and engine settings over the
    top-level ones, the deployment's served name, and with a given engine.port its own port (port + 2 per
    engine before it: prefill 1..P, then decode 1..D). A surge (an index above the role's replicas) takes a
    port the panel picks."""
    entry = spec["roles"][role]
    engine = dict(spec["engine"])
    engine.update({key: entry["engine"][key] for key in entry["engine_given"]})
    given = set(spec["engine_given"]) | set(entry["engine_given"]) | {"served_model_name"}
    engine["served_model_name"] = (
        spec["engine"].get("served_model_name") if "served_model_name" in spec["engine_given"] else ""
    ) or spec["name"]
    before = index - 1 + (spec["roles"]["prefill"]["replicas"] if role == DeploymentRole.DECODE else 0)
    if "port" in given and engine.get("port") and index <= entry["replicas"]:
        engine["port"] = engine["port"] + 2 * before
    else:
        engine.pop("port", None)
        given.discard("port")
    return {
        **spec,
        "name": role_member_name(spec["name"], role, index),
        "placement": entry["placement"] or spec.get("placement"),
        "nodes": [],
        "engine": engine,
        "engine_given": sorted(given),
        "replicas": 1,
        "roles": None,
    }


def plan_engine(spec, model, artifact, user, role: str, index: int, row: Deployment | None) -> DeploymentPlan:
    """Engine `index` of `role` planned in place of `row` (or as a new row), without its KV config yet:
    that names both roles' TP/DP, known once each role has a plan. 400 under `roles.<role>` when it does
    not fit."""
    member = member_spec(spec, role, index)
    try:
        planned = plan_for(build_request(member, model, artifact, user, row), member, user, row)
    except InvalidInput as error:
        refuse(
            f"roles.{role}",
            _("{name} ({role} {i}) does not fit: {why}").format(
                name=member["name"], role=role, i=index, why=flat_errors(error.detail)
            ),
        )
    if len(planned.parts) > 1:
        refuse(f"roles.{role}", _("Each engine of a role runs on one node."))
    return planned


def parallel_of(plans: list[tuple[str, DeploymentPlan]]) -> dict[str, list[int]]:
    """{role: [TP, DP]} of the first plan of each role: what every engine's KV config says of both."""
    parallel: dict[str, list[int]] = {}
    for role, planned in plans:
        payload = planned.parts[0].payload
        parallel.setdefault(role, [payload["tensor_parallel_size"], payload["data_parallel_size"]])
    return parallel


def with_kv_transfer(planned: DeploymentPlan, connector: str, role: str, engine_id: str, parallel) -> None:
    """Give the plan its role's --kv-transfer-config and env (and say so, with the matrix's sources)."""
    for part in planned.parts:
        try:
            rendered = render_kv_transfer(
                connector, role, node_stack(part.node), chip=planned.chip, engine_id=engine_id,
                port=part.payload["port"], parallel={key: tuple(value) for key, value in parallel.items()},
                node_ip=part.node.address or "", ifname=(part.node.facts or {}).get("hccl_ifname") or "eth0",
            )  # fmt: skip
        except KVSplitError as error:
            refuse("roles", agent_text(message_of(error)))
        except KVTransferError as error:
            refuse(
                "kv_connector",
                _("The {connector} connector cannot run on {node}: {why}").format(
                    connector=connector, node=part.node.name, why=agent_text(message_of(error))
                ),
            )
        part.payload["kv_transfer_config"] = rendered.config
        part.payload["env"] = {**(part.payload.get("env") or {}), **rendered.env}
        planned.warnings = [
            *planned.warnings,
            {
                "code": "kv_connector",
                "level": "info",
                "message": _("{role}: {connector} as {kv_role} (sources: {sources})").format(
                    role=role, connector=rendered.config["kv_connector"], kv_role=rendered.config["kv_role"],
                    sources=", ".join(rendered.sources),
                ),
            },
        ]  # fmt: skip
    try:
        planned.as_review()
    except LaunchSpecError as error:
        refuse("non_field_errors", str(error))


def warnings_of(plans) -> list[dict[str, Any]]:
    """The plans' warnings, each said once (every engine of a role says the same)."""
    seen, out = set(), []
    for planned in plans:
        for warning in planned.warnings:
            key = (warning.get("code"), warning.get("message"))
            if key not in seen:
                seen.add(key)
                out.append(warning)
    return out


def take_engine_plan(row: Deployment, planned: DeploymentPlan, role: str, connector: str | None) -> None:
    """The row takes the plan and its role (a plain row of a plain spec keeps no topology)."""
    services.take_plan(row, planned)
    row.role = role
    plan = {key: value for key, value in (row.plan or {}).items() if key != "topology"}
    if role:
        plan["topology"] = {"kv_connector": connector, "role": role}
    row.plan = plan
    row.save(update_fields=["role", "plan"])


def planned_for_rollout(spec, model, artifact, user, primary: Deployment, row: Deployment | None, role: str):
    """A rolling update's plan of `row` (in place) or of a surge engine of `role` (row None), with its KV
    config from the TP/DP the apply planned for each role; (plan, index)."""
    index = member_index(primary.name, row.name, role) if row is not None else next_index(primary, role)
    planned = plan_engine(spec, model, artifact, user, role, index, row)
    name = row.name if row is not None else role_member_name(primary.name, role, index)
    # A rollout an apply began carries what it planned; one begun from the spec as it runs (a restart, a
    # failover move) takes the TP/DP the engines run with.
    parallel = spec.get(PARALLEL) or running_parallel(primary)
    with_kv_transfer(planned, spec["kv_connector"], role, name, parallel)
    return planned, index


def running_parallel(primary: Deployment) -> dict[str, list[int]]:
    """{role: [TP, DP]} of the first engine of each role as it runs."""
    parallel = {}
    for role in ROLES:
        rows = role_rows(primary, role)
        if rows:
            launch = rows[0].spec or {}
            parallel[role] = [launch.get("tensor_parallel_size") or 1, launch.get("data_parallel_size") or 1]
    return parallel
