"""Deployment use-cases: create, start, stop, restart, delete, benchmark (what agents report back is
applied by panel.deployments.rollouts.reconcile).

CONTRACT for the wizard and the deployment page (REST under /api/v1/deployments/, JSON):

  POST /plan/            body = the wizard spec below; 200 {"fits", "chip", "plan", "memory_per_npu",
                         "warnings": [{code, level, message}], "nodes": [{node, role, logic_ids, argv, env,
                         command, launch}]}; 400 {"detail", "errors": {field: [messages]}} (planner
                         reasons become field errors: tensor_parallel_size, max_model_len, nodes, model,
                         quantization).
  POST /                 same body (+ header Idempotency-Key); 201 the deployment (detail shape) + "warnings".
       spec: {name, model (id), artifact (id) | path, nodes: [{node: name, npus: [logic ids]}],
              tensor_parallel_size?, data_parallel_size?, max_model_len?, dtype, gpu_memory_utilization,
              quantization (null|"ascend"), enforce_eager, served_model_name?, port?,
              extra_flags {flag: value}, runtime ("process"|"container")}
  GET  /, /{id}/         {id, name, model, model_name, nodes, npus, status (observed), desired_state, reason,
                         endpoint, runtime, restart_count, failed_restarts, spec, plan, metrics, metrics_at,
                         operation (latest launch/stop operation id), created, updated}
  POST /{id}/stop/ /start/ /restart/   202 the deployment; DELETE /{id}/  202 (stops, releases the NPUs, then
                         the row goes away).
  GET  /{id}/logs/?after_seq=N   {"results": [{seq, time, node, line}], "last_seq"}; GET /{id}/logs.txt
  GET  /{id}/metrics/    {"metrics": {...}, "time"}; GET/POST /{id}/benchmarks/ ({concurrency: [1,4,16,64],
                         prompt_len, output_len, requests}); GET /api/v1/benchmarks/ all runs, comparable.
  GET  /{id}/metrics/history/   {"points": [{time, metrics}]}: the last hour of charted figures (Redis).
  POST /{id}/chat/       OpenAI chat body; proxied to the engine (SSE passed through when "stream": true).
  Failure: GET /{id}/ "findings" = {"findings": the toolkit's diagnose findings, "log_tail": [lines]} of
  the last failed start (or of an engine found dead); each hint as it fits where the deployment runs
  (panel/deployments/launch/findings.py).

Websocket group deployment.<name>: {"type": "deployment.status", name, status, desired_state, reason,
restart_count, endpoint}, {"type": "engine.metrics", name, node, time, metrics}, {"type": "deployment.logs",
name, lines: [{seq, time, node, line}]}. While starting, the launch operation (id in "operation") also
streams progress events (stage_key, percent, kv_cache_tokens) on operation.<id>.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from panel.audit import actions as audit
from panel.audit.services import record
from panel.core.domain.choices import DeploymentState, DesiredState, OperationKind, OperationStatus
from panel.core.rest.exceptions import unique_violation
from panel.deployments import alerting, metrics_history, reasons
from panel.deployments.conflicts import DeploymentConflict
from panel.deployments.failover import fence
from panel.deployments.launch.engine_keys import ensure_engine_key, sealed_for_node
from panel.deployments.launch.pd_fabric import gate_pd_launch
from panel.deployments.models import Benchmark, Deployment
from panel.deployments.placement import hbm
from panel.deployments.placement.planned_rows import fill_from_plan
from panel.deployments.placement.planning import DeploymentPlan
from panel.deployments.rollouts.drain import holds_stop
from panel.fabric.services import gate_launch
from panel.nodes.models import Node
from panel.operations.models import Operation
from panel.operations.services import create_operation
from panel.realtime.broadcast import DEPLOYMENTS, broadcast, deployment_group
from workers.task_names import (
    AGENT_BENCHMARK_DEPLOYMENT,
    AGENT_LAUNCH_DEPLOYMENT,
    AGENT_STOP_DEPLOYMENT,
)

log = logging.getLogger(__name__)

ACTIVE = (OperationStatus.PENDING, OperationStatus.RUNNING)


def status_message(deployment: Deployment) -> dict:
    return {
        "type": "deployment.status",
        "name": deployment.name,
        "status": deployment.observed_state,
        "desired_state": deployment.desired_state,
        "reason": deployment.reason,
        "restart_count": deployment.restart_count,
        "endpoint": deployment.endpoint,
    }


def announce(deployment: Deployment) -> None:
    message = status_message(deployment)
    # Also to DEPLOYMENTS: a watched deployment list learns of new and changed ones there.
    transaction.on_commit(lambda: broadcast(deployment_group(deployment.name), message, also=(DEPLOYMENTS,)))
    tell_primary(deployment.replica_of_id, deployment.name, deployment.observed_state)
    alerting.observed(deployment)  # monitoring raises or resolves its alerts from it


def tell_primary(primary_id: int | None, name: str, status: str) -> None:
    """A replica changed, came or went: the primary's page redraws its replicas card. A type of its own,
    so that what follows the primary's status (watch, wait, deployment.js) never takes it for the primary."""
    if primary_id is None:
        return
    primary = Deployment.objects.filter(pk=primary_id).values_list("name", flat=True).first()
    if primary is not None:
        message = {"type": "deployment.replicas", "name": primary, "replica": name, "status": status}
        transaction.on_commit(lambda: broadcast(deployment_group(primary), message))


def move(deployment: Deployment, state: str, reason: str | list[dict] = "") -> None:
    """`reason`: English text or translatable parts (panel/deployments/reasons.py)."""
    if deployment.observed_state != state or deployment.reason != reasons.english(reasons.as_parts(reason)):
        deployment.move_to(state, reason)
        announce(deployment)


def endpoint_of(deployment: Deployment) -> str:
    """What users call: the panel's gateway (<PANEL_URL>/v1, model = the served name), never the engine,
    which only the panel may reach. Empty without PANEL_URL: pages and the API then show the address the
    viewer used (panel.gateway.urls.gateway_url)."""
    return f"{settings.PANEL_URL.rstrip('/')}/v1" if settings.PANEL_URL else ""


def engine_url(deployment: Deployment) -> str:
    """The engine's own OpenAI base URL, for the panel's calls only: a multi-node deployment's API server
    runs on its head node (its followers are headless)."""
    head_name = next((part["node"] for part in parts_of(deployment) if part.get("role") != "follower"), None)
    nodes = deployment.nodes.all()
    head = nodes.filter(name=head_name).first() if head_name else nodes.order_by("pk").first()
    host = (head.address if head and head.address else "") or "127.0.0.1"
    return f"http://{host}:{deployment.spec.get('port')}/v1"


def served_name_of(deployment: Deployment) -> str:
    return deployment.spec.get("served_model_name") or deployment.name


def take_plan(deployment: Deployment, planned: DeploymentPlan) -> None:
    """Give the deployment what was planned: model, copy, launch per node, NPUs. Saves it. The engine it may
    run on a node the plan leaves is stopped there (failover.fence: now, or when a silent node returns)."""
    if deployment.pk is not None:
        going = [part.node for part in planned.parts]
        leaving = [node for node in deployment.nodes.all() if node not in going]
        fence.left(deployment, leaving, [node.name for node in going])
    fill_from_plan(deployment, planned)
    deployment.save()
    deployment.nodes.set([part.node for part in planned.parts])
    deployment.npus.set([npu for part in planned.parts for npu in part.npus])
    deployment.endpoint = endpoint_of(deployment)
    deployment.save(update_fields=["endpoint"])


def create_deployment(
    planned: DeploymentPlan, user=None, start: bool = True, replica_of: Deployment | None = None
) -> Deployment:
    """`start` False: created stopped (a spec with `state: stopped`); its NPUs are held all the same.
    `replica_of`: the primary of a spec with several replicas (panel/deployments/rollouts/replicas.py)."""
    data = planned.data
    with transaction.atomic():
        # A deleted deployment's name may be taken again once its row is gone.
        Deployment.objects.filter(name=data["name"], desired_state=DesiredState.DELETED).delete()
        deployment = Deployment(name=data["name"], created_by=user, replica_of=replica_of)
        try:
            with transaction.atomic():
                take_plan(deployment, planned)
        except IntegrityError as error:
            if unique_violation(error) is None:
                raise
            # Another request created it between this one's checks and its insert (parallel pipelines).
            raise DeploymentConflict(
                _("{name} was just created by another request; read it, then apply again.").format(
                    name=data["name"]
                )
            ) from None
        record(
            user,
            audit.DEPLOYMENT_CREATED,
            deployment.name,
            model=deployment.model.name,
            nodes=[part.node.name for part in planned.parts],
            extra_flags=data["extra_flags"],
        )
        if start:
            launch(deployment, user=user)
        else:
            deployment.desired_state = DesiredState.STOPPED
            move(deployment, DeploymentState.STOPPED, "")
            deployment.save()
        if replica_of is not None:
            tell_primary(replica_of.pk, deployment.name, deployment.observed_state)
    return deployment


def parts_of(deployment: Deployment) -> list[dict]:
    return deployment.spec.get("parts") or []


def active_operations(deployment: Deployment):
    # A launch waiting for its NPU network check (panel.fabric) is busy too, also when the check it waits
    # for was started for another engine of its deployment (pd_fabric: one check for their NPU pairs).
    mine = Q(
        target=deployment.name,
        kind__in=[OperationKind.DEPLOY, OperationKind.STOP, OperationKind.FABRIC_CHECK],
    )
    check = (deployment.runtime or {}).get("fabric_check")
    if check is not None:
        mine |= Q(kind=OperationKind.FABRIC_CHECK, params__fabric_check=check)
    return Operation.objects.filter(mine, status__in=ACTIVE)


def launch(deployment: Deployment, user=None) -> None:
    """Send one launch per node (the head last is not needed: followers dial the head and wait)."""
    move(deployment, DeploymentState.STARTING, "")
    deployment.next_restart_at = None
    deployment.drain_until = None
    deployment.probe_failures = 0
    deployment.runtime = {"nodes": {}}
    ensure_engine_key(deployment)
    # Several nodes: their NPU network is checked first; the check sends the launches when it passes.
    # An engine of a disaggregated deployment: the network to the other role's hosts is checked first.
    waits_for_fabric = gate_launch(deployment, user) or gate_pd_launch(deployment, user)
    if waits_for_fabric:
        move(
            deployment,
            DeploymentState.STARTING,
            gettext_noop("Checking the NPU network (HCCL fabric) before the launch."),
        )
    deployment.save()
    if not waits_for_fabric:
        send_launches(deployment, user)


def send_launches(deployment: Deployment, user=None) -> None:
    """One launch operation per node of the deployment."""
    nodes = {node.name: node for node in deployment.nodes.all()}
    for part in parts_of(deployment):
        _start_on_node(
            deployment,
            part["node"],
            OperationKind.DEPLOY,
            AGENT_LAUNCH_DEPLOYMENT,
            user,
            params={"role": part["role"]},
            payload={
                "name": deployment.name,
                "spec": hbm.launch_payload(deployment, part),
                **_runtime_of(deployment, part),
                "engine_key": sealed_for_node(deployment, nodes[part["node"]]),
                "start_timeout_s": settings.PANEL_DEPLOY_START_TIMEOUT_S,
                "health_interval_s": settings.PANEL_DEPLOY_HEALTH_INTERVAL_S,
                "stop_grace_s": settings.PANEL_DEPLOY_STOP_GRACE_S,
            },
        )


def _runtime_of(deployment: Deployment, part: dict) -> dict:
    if deployment.runtime_kind != "container":
        return {}
    return {"runtime_kind": "container", "container": part.get("container") or {}}


def _start_on_node(
    deployment: Deployment, node_name: str, kind, task_name: str, user, *, params: dict, payload: dict
) -> Operation:
    """An agent operation for this deployment on one of its nodes."""
    return create_operation(
        kind=kind,
        node=Node.objects.get(name=node_name),
        task_name=task_name,
        user=user,
        target=deployment.name,
        params={"deployment": deployment.pk, **params},
        task_kwargs={"payload": payload},
    )


def send_stop(
    deployment: Deployment, user=None, reason: str | list[dict] = "", change_state: bool = True
) -> None:
    """Stop the engines; while the gateway still has requests in flight on them, only mark the deployment
    stopping (out of the pool) and leave the stop to the reconcile tick once they ended
    (panel.deployments.rollouts.drain)."""
    if change_state and deployment.observed_state not in (DeploymentState.STOPPED, DeploymentState.STOPPING):
        move(deployment, DeploymentState.STOPPING, reason)
    if holds_stop(deployment):
        deployment.save()
        return
    deployment.drain_until = None
    deployment.save()
    for part in parts_of(deployment):
        _start_on_node(
            deployment,
            part["node"],
            OperationKind.STOP,
            AGENT_STOP_DEPLOYMENT,
            user,
            params={},
            payload={
                "name": deployment.name,
                "runtime_kind": deployment.runtime_kind,
                # A deleted deployment's container goes too; a stopped one's stays, its exit code and log
                # readable, until the next start replaces it.
                "remove": deployment.desired_state == DesiredState.DELETED,
                "grace_s": settings.PANEL_DEPLOY_STOP_GRACE_S,
                "runtime": (deployment.runtime.get("nodes") or {}).get(part["node"]) or {},
            },
        )


def _locked(deployment: Deployment) -> Deployment:
    return Deployment.objects.select_for_update().get(pk=deployment.pk)


def _locked_unless_deleted(deployment: Deployment) -> Deployment:
    deployment = _locked(deployment)
    if deployment.desired_state == DesiredState.DELETED:
        raise DeploymentConflict(_("This deployment is being deleted."))
    return deployment


def _locked_to_run(deployment: Deployment) -> Deployment:
    """Lock the row and want it running again, unless a start or stop is still under way."""
    deployment = _locked_unless_deleted(deployment)
    if active_operations(deployment).exists():
        raise DeploymentConflict(_("Wait for the current start or stop to finish."))
    deployment.desired_state = DesiredState.RUNNING
    deployment.failed_restarts = 0
    return deployment


def stop(deployment: Deployment, user=None) -> Deployment:
    with transaction.atomic():
        deployment = _locked_unless_deleted(deployment)
        deployment.desired_state = DesiredState.STOPPED
        if deployment.observed_state == DeploymentState.STOPPED:
            deployment.save()
        else:
            send_stop(deployment, user)
    return deployment


def start(deployment: Deployment, user=None) -> Deployment:
    with transaction.atomic():
        deployment = _locked_to_run(deployment)
        if deployment.observed_state in (DeploymentState.RUNNING, DeploymentState.STARTING):
            deployment.save()
        else:
            launch(deployment, user)
    return deployment


def restart(deployment: Deployment, user=None, reason: list[dict] | None = None) -> Deployment:
    """Stop then start: the launch task stops the running engine itself before starting the new one.
    `reason`: why, as translatable parts (default: who asked for the restart)."""
    with transaction.atomic():
        deployment = _locked_to_run(deployment)
        deployment.restart_count += 1
        if deployment.observed_state in (DeploymentState.STOPPED, DeploymentState.PENDING):
            launch(deployment, user)  # nothing runs: a restart is a start
            return deployment
        deployment.save()
        asked = (
            reasons.part(gettext_noop("Restart asked by {user}"), user=user.get_username())
            if user
            else reasons.part(gettext_noop("Restart asked by the panel"))
        )
        send_stop(deployment, user, reason or [asked])
    return deployment


def delete(deployment: Deployment, user=None) -> Deployment:
    """Stop, release the NPUs, remove the row; a primary takes its replicas with it."""
    with transaction.atomic():
        deployment = _locked(deployment)
        for replica in deployment.replicas.exclude(desired_state=DesiredState.DELETED):
            delete(replica, user)
        deployment.desired_state = DesiredState.DELETED
        record(user, audit.DEPLOYMENT_DELETED, deployment.name, state=deployment.observed_state)
        if deployment.observed_state in (DeploymentState.STOPPED, DeploymentState.PENDING) and not (
            active_operations(deployment).exists()
        ):
            release_and_remove(deployment)
        else:
            send_stop(deployment, user)
    return deployment


def release_and_remove(deployment: Deployment) -> None:
    deployment.npus.clear()
    name = deployment.name
    tell_primary(deployment.replica_of_id, name, "deleted")
    deployment.delete()
    transaction.on_commit(lambda: metrics_history.forget(name))
    alerting.gone(name)
    gone = {"type": "deployment.status", "name": name, "status": "deleted", "desired_state": "deleted"}
    transaction.on_commit(lambda: broadcast(deployment_group(name), gone, also=(DEPLOYMENTS,)))


def start_benchmark(deployment: Deployment, params: dict, user=None) -> Benchmark:
    if deployment.observed_state != DeploymentState.RUNNING:
        raise DeploymentConflict(_("Benchmark a running deployment."))
    port = deployment.spec["port"]
    head = deployment.nodes.get(name=parts_of(deployment)[0]["node"])
    with transaction.atomic():
        operation = _start_on_node(
            deployment,
            parts_of(deployment)[0]["node"],
            OperationKind.BENCHMARK,
            AGENT_BENCHMARK_DEPLOYMENT,
            user,
            params=params,
            payload={
                **params,
                "base_url": f"http://127.0.0.1:{port}",
                "model": served_name_of(deployment),
                "engine_key": sealed_for_node(deployment, head),
            },
        )
        return Benchmark.objects.create(
            deployment=deployment,
            deployment_name=deployment.name,
            model_name=deployment.model.name,
            spec={k: v for k, v in deployment.spec.items() if k != "parts"},
            params=params,
            status="running",
            operation=operation,
            created_by=user,
        )
