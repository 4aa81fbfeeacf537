"""A deployment's log: lines from its engine, its agent and the panel, each with the deployment's own seq
(Deployment.log_seq, advanced under the row's lock by the caller), stored and then broadcast on
deployment.<name> as {"type": "deployment.logs", "name", "lines": [{seq, time, node, line}]} once the
transaction commits. GET /api/v1/deployments/{id}/logs/?after_seq=N fills what a socket missed.
"""

from django.db import transaction
from django.utils import timezone

from panel.deployments.models import Deployment, DeploymentLog
from panel.operations.models import Operation
from panel.realtime.broadcast import broadcast, deployment_group


def append_logs(deployment: Deployment, node: str, lines: list[str], when=None) -> list[DeploymentLog]:
    if not lines:
        return []
    when = when or timezone.now()
    rows = []
    for line in lines:
        deployment.log_seq += 1
        rows.append(
            DeploymentLog(deployment=deployment, seq=deployment.log_seq, time=when, node=node, line=line)
        )
    DeploymentLog.objects.bulk_create(rows)
    messages = [row.as_message() for row in rows]
    name = deployment.name
    transaction.on_commit(
        lambda: broadcast(
            deployment_group(name), {"type": "deployment.logs", "name": name, "lines": messages}
        )
    )
    return rows


def log_start_events(operation: Operation, events: list, failed: bool) -> None:
    """A start's stages and, when it fails, its agent's lines and the error go into the deployment's log:
    a start that failed before any probe read the engine's log still leaves its evidence there."""
    if operation.node is None:
        return
    lines = []
    staged = [event for event in events if event.kind == "progress" and event.payload.get("stage_key")]
    earlier = (
        operation.events.filter(kind="progress", seq__lt=staged[0].seq).order_by("-seq").first()
        if staged
        else None
    )
    stage = (earlier.payload.get("stage_key") if earlier else None) or ""
    for event in staged:
        key = event.payload["stage_key"]
        if key != stage:
            stage = key
            title, percent = event.payload.get("stage", key), event.payload.get("percent", 0)
            lines.append(f"[panel] start: {title} ({percent}%)")
    if failed:
        engine_lines = operation.events.filter(kind="log", attempt=operation.attempt).order_by("seq")
        lines += [f"[agent] {event.payload.get('line', '')}" for event in engine_lines]
        lines.append(f"[panel] start failed: {operation.error}")
        if operation.hint:
            lines.append(f"[panel] hint: {operation.hint}")
    if not lines:
        return  # most batches of a start are its engine's lines: no lock, no row read for them
    deployment = Deployment.objects.select_for_update().filter(name=operation.target).first()
    if deployment is not None:
        append_logs(deployment, operation.node.name, lines)
        deployment.save(update_fields=["log_seq"])
