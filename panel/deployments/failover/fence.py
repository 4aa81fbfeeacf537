"""Engines left behind on a node a row was moved off (docs/npu-health.md, "A node that goes silent").

A row's new plan restarts it on its new nodes: the stop of that restart goes to them, not to the nodes it
leaves. A node it leaves that is online gets a stop of its own at once (`left`). One that is silent gets
nothing (the failover moves a row off a lost node; nothing is sent there): a host that lost power took its
engines with it, but one only cut off (its network, or its agent stopped) keeps them running, holding NPUs
the panel's ledger gave to others and serving nobody. The node keeps a list of them (`Node.left_engines`,
with the runtime each ran with), and when it heartbeats again (`node_online`) each is stopped there
(`fence`): a stop operation sent to that node alone, naming the very process (pid and start time) so the
agent never stops another, and an `engine_fenced` decision on the deployment saying why. A row that runs on
that node again (placed there since) is the replica that now serves: it is left alone. Nothing moves back:
the fence only stops, and the failover never places on a node because it returned.

The stop is its own operation, targeted `<name>@<node>`, so the row's own state machine (its restart, which
waits for its own stops; panel.deployments.rollouts.reconcile.on_operation_terminal) never takes it for one
of its stops.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext_noop

from panel.core.domain.choices import (
    DecisionKind,
    DecisionOutcome,
    DeploymentState,
    DesiredState,
    NodeStatus,
    OperationKind,
)
from panel.deployments import decisions
from panel.deployments.models import Deployment
from panel.deployments.reasons import part
from panel.nodes.models import Node
from panel.operations.services import create_operation
from workers.task_names import AGENT_STOP_DEPLOYMENT

log = logging.getLogger(__name__)

NOTHING_RUNS = (DeploymentState.STOPPED, DeploymentState.PENDING)


def left(row: Deployment, leaving: list[Node], going_to: list[str]) -> None:
    """`row` takes a plan off `leaving` (onto `going_to`): the engine it may run on each of them is stopped
    there now (an online node) or noted on the node for when it returns (a silent one). Call it before the
    row's runtime is replaced (services.take_plan), inside the transaction of the change."""
    if not leaving or row.observed_state in NOTHING_RUNS:
        return
    runtimes = (row.runtime or {}).get("nodes") or {}
    for node in leaving:
        entry = {
            "name": row.name,
            "runtime_kind": row.runtime_kind,
            "runtime": runtimes.get(node.name) or {},
            "moved_to": list(going_to),
            "at": timezone.now().isoformat(),
        }
        locked = Node.objects.select_for_update().get(pk=node.pk)
        entry["silent"] = locked.status != NodeStatus.ONLINE
        if not entry["silent"]:
            _stop(locked, row, entry)  # the row still lists this node until its plan is saved: no check
            continue
        kept = [e for e in locked.left_engines or [] if e.get("name") != row.name]
        locked.left_engines = [*kept, entry]
        locked.save(update_fields=["left_engines"])


def fence(node: Node) -> list[str]:
    """Stop the engines noted on `node` (it is online again, or was all along); returns the names stopped.
    Runs inside the caller's transaction (the heartbeat's, which holds the node row locked)."""
    entries = list(node.left_engines or [])
    if not entries:
        return []
    stopped = []
    for entry in entries:
        name = str(entry.get("name") or "")
        row = Deployment.objects.exclude(desired_state=DesiredState.DELETED).filter(name=name).first()
        if row is not None and row.nodes.filter(pk=node.pk).exists():
            log.info(
                "%s runs on %s again: its engine there is the one that serves, not fenced", name, node.name
            )
            continue
        _stop(node, row, entry)
        stopped.append(name)
    Node.objects.filter(pk=node.pk).update(left_engines=[])
    node.left_engines = []
    return stopped


def on_node_online(sender, node: Node, **kwargs) -> None:
    """panel.nodes.signals.node_online: the node heartbeats again; its left engines are stopped."""
    if node.left_engines:
        fence(node)


def _stop(node: Node, row: Deployment | None, entry: dict) -> None:
    """The stop of `entry`'s engine on `node`, and the decision that says why (on the row, if it is still
    there)."""
    name = str(entry.get("name") or "")
    create_operation(
        kind=OperationKind.STOP,
        node=node,
        task_name=AGENT_STOP_DEPLOYMENT,
        target=f"{name}@{node.name}",
        params={"fenced": name},
        task_kwargs={
            "payload": {
                "name": name,
                "runtime_kind": entry.get("runtime_kind") or "process",
                "remove": False,
                "grace_s": settings.PANEL_DEPLOY_STOP_GRACE_S,
                "runtime": entry.get("runtime") or {},
            }
        },
    )
    if row is not None:
        _record(row, node, entry)


SILENT = gettext_noop(
    "{name} was moved off {node} while the node was silent; {node} is back and its old engine there may "
    "still run (a node cut off, not powered off): it is stopped, so it holds no NPUs of {node}. {name} "
    "serves on {now}; nothing moves back."
)
MOVED = gettext_noop("{name} moved from {node} to {now}: its old engine on {node} is stopped.")


def _record(row: Deployment, node: Node, entry: dict) -> None:
    text = SILENT if entry.get("silent") else MOVED
    now = ", ".join(entry.get("moved_to") or []) or "-"
    reason = [part(text, name=row.name, node=node.name, now=now)]
    decisions.record(
        row, DecisionKind.ENGINE_FENCED, reason=reason, role=row.role, outcome=DecisionOutcome.DONE
    )
