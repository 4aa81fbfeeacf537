"""The reconcile loop: make what runs match what was asked, and notice when an engine dies.

Every PANEL_DEPLOY_RECONCILE_S the beat task `panel.reconcile_deployments` runs `tick()`: it asks each node
with live deployments for a probe (pid alive, /health, new log lines, /metrics) and starts, restarts or
stops deployments whose observed state lags the desired one. The probe's answer comes back through
`ingest_probe()`; a launch, stop or benchmark that ended, through `on_operation_terminal()`. A restarted
panel or agent adopts what still runs: the state lives in the database and in the agent's state files, and
a launch finds a live, answering engine with the same command and keeps it.

The decisions are pure functions (`backoff_s`, `after_probe`, `after_failed_launch`) so they are unit-tested
without a database.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext_noop

from panel.core.domain.choices import (
    DeploymentState,
    DesiredState,
    NodeTransport,
    OperationKind,
    OperationStatus,
)
from panel.deployments import metrics_history, reasons, services
from panel.deployments.autoscale import decider
from panel.deployments.failover import replace
from panel.deployments.launch.findings import fitting_hint
from panel.deployments.logs import append_logs
from panel.deployments.models import Benchmark, Deployment
from panel.deployments.placement import ports
from panel.deployments.rollouts import restarts, rollouts
from panel.forensics.services import collect_after_failed_start
from panel.nodes.agents.trust import refuse, send_agent_task
from panel.nodes.models import Node
from panel.operations.models import Operation
from panel.realtime.broadcast import broadcast, deployment_group
from workers.task_names import AGENT_PROBE_DEPLOYMENTS

log = logging.getLogger(__name__)

PROBED_STATES = (DeploymentState.RUNNING, DeploymentState.UNHEALTHY)
# What a probe needs to find an engine: a process's pid, or a container's engine and id; where it listens.
PROBED_RUNTIME_KEYS = ("pid", "port", "log_path", "host", "engine", "container_id", "container_name")


@dataclass(frozen=True)
class Policy:
    unhealthy_after: int  # failed health probes of a live engine before it counts as unhealthy
    max_restarts: int  # launches in a row that may fail before the deployment is failed
    backoff_base_s: float
    backoff_cap_s: float

    @classmethod
    def from_settings(cls) -> Policy:
        return cls(
            unhealthy_after=settings.PANEL_DEPLOY_UNHEALTHY_AFTER,
            max_restarts=settings.PANEL_DEPLOY_MAX_RESTARTS,
            backoff_base_s=settings.PANEL_DEPLOY_BACKOFF_BASE_S,
            backoff_cap_s=settings.PANEL_DEPLOY_BACKOFF_CAP_S,
        )


def backoff_s(failed_restarts: int, policy: Policy) -> float:
    """Wait before the next automatic restart: none for the first, then base, 2 x base, ... capped."""
    if failed_restarts <= 0:
        return 0.0
    return min(policy.backoff_cap_s, policy.backoff_base_s * 2 ** (failed_restarts - 1))


@dataclass(frozen=True)
class Verdict:
    state: str
    probe_failures: int
    restart: bool  # start the engine again (after backoff_s(failed_restarts))
    reason: str | list[dict] = ""  # text or parts (panel/deployments/reasons.py)


def after_probe(state: str, probe_failures: int, alive: bool, healthy: bool, policy: Policy) -> Verdict:
    """What one probe of a running (or unhealthy) engine means."""
    if not alive:
        return Verdict(
            DeploymentState.UNHEALTHY, probe_failures + 1, True, gettext_noop("The engine process exited.")
        )
    if healthy:
        return Verdict(DeploymentState.RUNNING, 0, False)
    failures = probe_failures + 1
    if failures >= policy.unhealthy_after:
        reason = [reasons.part(gettext_noop("/health failed {n} times in a row."), n=failures)]
        return Verdict(DeploymentState.UNHEALTHY, failures, True, reason)
    return Verdict(state, failures, False)


def after_failed_launch(failed_restarts: int, policy: Policy) -> tuple[str, int]:
    """(state, failed launches so far) after a launch that did not reach running."""
    failed = failed_restarts + 1
    if failed > policy.max_restarts:
        return DeploymentState.FAILED, failed
    return DeploymentState.UNHEALTHY, failed


def _node_runtime(deployment: Deployment, node: str) -> dict:
    return (deployment.runtime.get("nodes") or {}).get(node) or {}


def _set_node_runtime(deployment: Deployment, node: str, values: dict) -> None:
    nodes = dict(deployment.runtime.get("nodes") or {})
    nodes[node] = {**nodes.get(node, {}), **values}
    deployment.runtime = {**deployment.runtime, "nodes": nodes}


def schedule_restart(deployment: Deployment, policy: Policy, reason: str | list[dict], now: datetime) -> None:
    state, failed = after_failed_launch(deployment.failed_restarts, policy)
    deployment.failed_restarts = failed
    if state == DeploymentState.FAILED:
        reason = reasons.gave_up(reason, failed - 1)
        deployment.next_restart_at = None
        restarts.gave_up(deployment, reason, failed - 1)
    else:
        wait_s = backoff_s(failed - 1, policy)
        deployment.next_restart_at = now + timedelta(seconds=wait_s)
        restarts.restart_decided(deployment, reason, failed_restarts=failed, after_s=wait_s)
    services.move(deployment, state, reason)


def on_operation_terminal(operation: Operation) -> None:
    """A deploy, stop or benchmark operation ended (panel.operations.signals.operation_ended)."""
    if operation.kind == OperationKind.BENCHMARK:
        benchmark = Benchmark.objects.filter(operation=operation).first()
        if benchmark is not None:
            benchmark.status = operation.status
            benchmark.results = operation.result or {}
            benchmark.error = operation.error
            benchmark.save()
        return
    deployment = Deployment.objects.select_for_update().filter(name=operation.target).first()
    if deployment is None:
        return
    if operation.kind == OperationKind.DEPLOY:
        apply_launch_result(deployment, operation)
    elif operation.kind == OperationKind.STOP:
        apply_stop_result(deployment, operation)


def apply_launch_result(deployment: Deployment, operation: Operation) -> None:
    node = operation.node.name if operation.node else ""
    if deployment.desired_state != DesiredState.RUNNING:
        if operation.status == OperationStatus.SUCCEEDED:
            # Stopped while it started: the stop may have run before the engine was recorded.
            services.send_stop(deployment)
        deployment.save()
        return
    if operation.status == OperationStatus.SUCCEEDED:
        record = (operation.result or {}).get("runtime") or {}
        _set_node_runtime(deployment, node, {**record, "ready": True, "operation": str(operation.id)})
        nodes = [part["node"] for part in services.parts_of(deployment)]
        if all(_node_runtime(deployment, name).get("ready") for name in nodes):
            deployment.failed_restarts = 0
            deployment.probe_failures = 0
            services.move(deployment, DeploymentState.RUNNING, "")
            restarts.came_up(deployment)
    else:
        failure: dict = next((e.payload for e in operation.events.filter(kind="result").order_by("-seq")), {})
        deployment.runtime = {
            **deployment.runtime,
            "findings": failure.get("findings") or [],
            "log_tail": failure.get("log_tail") or [],
        }
        reason = reasons.launch_failed(operation.error, fitting_hint(operation.hint, deployment))
        _after_failed_launch(deployment, node, operation.result or {}, reason)
        collect_after_failed_start(
            deployment
        )  # every node's logs and state of this failure (panel.forensics)
        # The other nodes of a multi-node deployment cannot serve without this one.
        stopping = services.active_operations(deployment).filter(kind=OperationKind.STOP).exists()
        if len(services.parts_of(deployment)) > 1 and not stopping:
            services.send_stop(deployment, change_state=False)
    deployment.save()


def _after_failed_launch(deployment: Deployment, node: str, outcome: dict, reason: list[dict]) -> None:
    """Retry a launch that may work next time, after its back-off. A permanent failure (the agent says the
    same launch would fail the same way: a missing model folder, a port another process holds) fails the
    deployment at once, except a port the panel picked: that moves to a free one and starts again. Every
    start that follows counts as a restart."""
    now = timezone.now()
    if outcome.get("permanent"):
        moved = _move_refused_port(deployment, node, outcome)
        if moved is None:
            deployment.failed_restarts += 1
            deployment.next_restart_at = None
            services.move(deployment, DeploymentState.FAILED, reason)
            restarts.not_restarted(deployment, reason)
            return
        deployment.restart_count += 1
        if len(services.parts_of(deployment)) == 1:
            services.launch(deployment)  # at once: a rollout waiting on it sees a start, not a failure
            services.move(deployment, DeploymentState.STARTING, moved)
        else:
            deployment.next_restart_at = now  # the tick starts it once its other nodes have stopped
            services.move(deployment, DeploymentState.UNHEALTHY, moved)
        return
    schedule_restart(deployment, Policy.from_settings(), reason, now)
    if deployment.observed_state != DeploymentState.FAILED:
        deployment.restart_count += 1


def _move_refused_port(deployment: Deployment, node: str, outcome: dict) -> list[dict] | None:
    """The reason when the refused port was the panel's pick and has moved; None when it stays."""
    refused = outcome.get("port")
    if outcome.get("code") != "port_in_use" or refused != deployment.spec.get("port"):
        return None
    port = ports.move_after_refusal(deployment, refused)
    if port is None:
        return None
    moved = gettext_noop("Port {port} is taken on {node} by another process: starting again on port {new}.")
    append_logs(deployment, node, [f"[panel] {moved.format(port=refused, node=node, new=port)}"])
    return [reasons.part(moved, port=refused, node=node, new=port)]


def apply_stop_result(deployment: Deployment, operation: Operation) -> None:
    node = operation.node.name if operation.node else ""
    _set_node_runtime(deployment, node, {"ready": False, "stopped": True})
    if services.active_operations(deployment).exclude(pk=operation.pk).exists():
        deployment.save()
        return
    if deployment.desired_state == DesiredState.DELETED:
        services.release_and_remove(deployment)
        return
    if deployment.desired_state == DesiredState.STOPPED:
        services.move(deployment, DeploymentState.STOPPED, "")
        restarts.stopped(deployment)
    elif deployment.observed_state == DeploymentState.STOPPING:
        # A restart: stopped on purpose, now start again.
        services.move(deployment, DeploymentState.STOPPED, reasons.current(deployment))
        deployment.save()
        services.launch(deployment)
        return
    deployment.save()


def ingest_probe(message: dict) -> None:
    """Apply one node's probe answer: states, restarts, logs and metrics."""
    node = message.get("node", "")
    policy = Policy.from_settings()
    now = timezone.now()
    when = parse_datetime(message.get("time") or "") or now
    for result in message.get("results") or []:
        with transaction.atomic():
            deployment = Deployment.objects.select_for_update().filter(name=result.get("name")).first()
            if deployment is None:
                continue
            if not deployment.nodes.filter(name=node).exists():
                refuse("probe", node, f"deployment {deployment.name} does not run on this node", "sender")
                continue
            _apply_probe(deployment, node, result, policy, now, when)
            deployment.save()


def _reads_on_from_the_held_offset(deployment, node, result) -> bool:
    """Whether a probe's log lines follow on from what the panel holds. Probes queued while an agent was away
    all read from the same offset, and an older one can be answered after a newer: their lines would be
    stored twice, and the offset moved back. An agent that does not say where it read from is trusted."""
    read_from = result.get("log_from")
    return read_from is None or int(read_from) == int(_node_runtime(deployment, node).get("log_offset") or 0)


def _apply_probe(deployment, node, result, policy, now, when) -> None:
    _store_probe_output(deployment, node, result, when)
    if not _probe_decides(deployment, node):
        return
    verdict = after_probe(
        deployment.observed_state,
        deployment.probe_failures,
        bool(result.get("alive")),
        bool(result.get("healthy")),
        policy,
    )
    deployment.probe_failures = verdict.probe_failures
    if result.get("findings"):
        deployment.runtime = {**deployment.runtime, "findings": result["findings"]}
    if result.get("exit") and not result.get("alive"):
        verdict = _container_ended(deployment, node, result["exit"], verdict, when)
    if verdict.restart:
        _restart_after_probe(deployment, policy, verdict, now)
    else:
        services.move(deployment, verdict.state, verdict.reason if verdict.state != "running" else "")


def _store_probe_output(deployment, node, result, when) -> None:
    """The probe's log lines (when they follow on from what the panel holds) and its engine metrics."""
    if _reads_on_from_the_held_offset(deployment, node, result):
        append_logs(deployment, node, result.get("lines") or [], when)
        if result.get("log_offset") is not None:
            _set_node_runtime(deployment, node, {"log_offset": result["log_offset"]})
    if result.get("metrics"):
        _store_metrics(deployment, node, result["metrics"], when)


def _probe_decides(deployment, node) -> bool:
    """Whether a probe may change the deployment's state: it should run, is in a probed state, its engine
    was ready here since its last launch, and no operation of its own is under way."""
    if deployment.desired_state != DesiredState.RUNNING or deployment.observed_state not in PROBED_STATES:
        return False
    if not _node_runtime(deployment, node).get("ready"):
        # No engine of this deployment ever became ready here since its last launch: a failed launch
        # waits for its back-off, which a probe finding "no engine" must not cut short.
        return False
    return not services.active_operations(deployment).exists()


def _container_ended(deployment, node, ended: dict, verdict: Verdict, when) -> Verdict:
    """A container says how it ended: its exit code, or that the OOM killer ended it."""
    summary = ended.get("summary") or ""
    deployment.runtime = {**deployment.runtime, "exit": ended}
    # The restart that follows resets the runtime; the log keeps how the container ended.
    append_logs(deployment, node, [f"[panel] engine container stopped: {summary}"], when)
    return Verdict(
        verdict.state,
        verdict.probe_failures,
        verdict.restart,
        [reasons.part(gettext_noop("The engine container stopped: {summary}."), summary=summary)],
    )


def _restart_after_probe(deployment, policy, verdict: Verdict, now) -> None:
    deployment.restart_count += 1
    if _ran_for_s(deployment, now) < settings.PANEL_DEPLOY_STABLE_S:
        # Died soon after it started: a crash loop backs off and gives up like a failed launch.
        schedule_restart(deployment, policy, verdict.reason, now)
        if deployment.observed_state == DeploymentState.FAILED:
            return
    else:
        deployment.next_restart_at = now
        services.move(deployment, DeploymentState.UNHEALTHY, verdict.reason)
        restarts.restart_decided(deployment, verdict.reason, restarts=deployment.restart_count)
    if deployment.next_restart_at <= now:
        services.launch(deployment)
        deployment.set_reason(verdict.reason)


def _ran_for_s(deployment: Deployment, now: datetime) -> float:
    """Seconds since the engine's newest process started (its record's start time on the host)."""
    starts = [float(n.get("started") or 0) for n in (deployment.runtime.get("nodes") or {}).values()]
    return now.timestamp() - max(starts) if starts and max(starts) > 0 else float("inf")


def _store_metrics(deployment: Deployment, node: str, metrics: dict, when: datetime) -> None:
    deployment.metrics = {**metrics, "node": node}
    deployment.metrics_at = when
    metrics_history.record(deployment.name, metrics, when)
    message = {
        "type": "engine.metrics",
        "name": deployment.name,
        "node": node,
        "time": when.isoformat(),
        "metrics": metrics,
    }
    name = deployment.name
    transaction.on_commit(lambda: broadcast(deployment_group(name), message))


def tick(now: datetime | None = None) -> dict:
    """One pass of the loop; returns what it did (for logs and tests)."""
    now = now or timezone.now()
    # Rollouts first: a surge that failed its launch is removed before this pass would relaunch it.
    done: dict[str, Any] = {"rollouts": rollouts.advance_all(), "probes": 0, "launches": 0, "stops": 0}
    # Then the failover, before this pass relaunches anything: a replica on a failed NPU whose restart is
    # due would be started in place again, on that NPU, and its move would wait for that launch to end (nor
    # is one whose move is under way started in place below).
    done["failover"] = replace.step_all(now)  # replicas on failed NPUs started again elsewhere
    probes: dict[str, list[dict]] = {}
    for deployment in Deployment.objects.exclude(observed_state=DeploymentState.STOPPED).order_by("pk"):
        with transaction.atomic():
            deployment = Deployment.objects.select_for_update().filter(pk=deployment.pk).first()
            if deployment is None:
                continue  # deleted since the list was read (a rollout's old replica, a finished delete)
            busy = services.active_operations(deployment).exists()
            if deployment.drain_until is not None and not busy:
                # Its stop waits for the gateway's requests in flight: sent once they ended or time is up.
                services.send_stop(deployment, change_state=False)
                done["stops"] += 1
                continue
            if deployment.desired_state == DesiredState.RUNNING and not busy:
                due = deployment.next_restart_at is None or deployment.next_restart_at <= now
                if (
                    deployment.observed_state == DeploymentState.PENDING
                    or (
                        deployment.observed_state == DeploymentState.UNHEALTHY
                        and due
                        and deployment.next_restart_at
                    )
                ) and not replace.being_moved(deployment):
                    services.launch(deployment)
                    done["launches"] += 1
                    continue
                if deployment.observed_state == DeploymentState.STARTING:
                    # Its launch operation ended without the result being applied (a lost message).
                    services.launch(deployment)
                    done["launches"] += 1
                    continue
            if deployment.desired_state != DesiredState.RUNNING and not busy:
                # Asked to stop (or delete) and not stopped yet: the last stop was lost or failed.
                services.send_stop(deployment)
                done["stops"] += 1
                continue
        if deployment.observed_state in PROBED_STATES:
            for part in services.parts_of(deployment):
                runtime = _node_runtime(deployment, part["node"])
                if not runtime.get("ready"):
                    continue  # nothing started there since the last launch (it failed): nothing to probe
                probes.setdefault(part["node"], []).append(
                    {
                        "name": deployment.name,
                        "runtime": {k: runtime[k] for k in PROBED_RUNTIME_KEYS if k in runtime},
                        "runtime_kind": deployment.runtime_kind,
                        "log_offset": runtime.get("log_offset", 0),
                        "follower": part["role"] == "follower",
                    }
                )
    for node, deployments in probes.items():
        request_probe(node, deployments)
        done["probes"] += 1
    done["autoscale"] = decider.step_all(now)  # on the figures the probes brought so far
    return done


def request_probe(node: str, deployments: list[dict]) -> None:
    target = Node.objects.filter(name=node, transport=NodeTransport.AGENT).first()
    if target is None:  # removed meanwhile, or an SSH node: no agent there to probe its engines
        return
    # A probe older than two intervals is stale; dropping it keeps a slow agent's queue short.
    expires = max(2.0, settings.PANEL_DEPLOY_RECONCILE_S * 2)
    send_agent_task(
        target, AGENT_PROBE_DEPLOYMENTS, {"request": {"deployments": deployments}}, expires=expires
    )
