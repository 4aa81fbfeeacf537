"""Deployment pages: the list, the live deployment page, its actions and benchmarks, and the comparison of
benchmarks across deployments. The wizard lives in panel.deployments.pages.wizard. Every change goes through
panel.deployments.services, the same functions the API calls."""

from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST, require_safe

from panel.accounts.roles import OPERATOR, VIEWER, has_role
from panel.core.domain.choices import (
    COLOUR_ALARM,
    COLOUR_OFFLINE,
    COLOUR_OK,
    COLOUR_RUNNING,
    DeploymentState,
    DesiredState,
    OperationKind,
)
from panel.core.views import TRANSITION, role_required
from panel.deployments import commands, downtime, services
from panel.deployments.api.serializers import BenchmarkRequestSerializer
from panel.deployments.autoscale.config import block_of
from panel.deployments.filtersets import BenchmarkFilterSet, DeploymentFilterSet
from panel.deployments.launch.findings import findings_of
from panel.deployments.models import Benchmark, Deployment
from panel.deployments.pages.forms import BenchmarkForm
from panel.deployments.pages.scale_roles import role_scale_rows
from panel.deployments.pages.wizard_state import flatten, memory_bars
from panel.deployments.rollouts import replicas
from panel.deployments.rollouts.node_resume import resume_after_drain
from panel.gateway.links import gateway_url
from panel.nodes.models import Node
from panel.operations.models import Operation
from workers.engine.running.logstages import STAGE_TITLES

# As the API's: the whole deployment, its replicas with it (panel/deployments/commands.py).
ACTIONS = {
    "stop": commands.stop,
    "start": commands.start,
    "restart": commands.restart,
    "delete": commands.delete,
}
LOG_LINES_ON_PAGE = 500
ROLLOUT_COLOURS = {"running": COLOUR_RUNNING, "succeeded": COLOUR_OK, "failed": COLOUR_ALARM}
ROLLOUT_PHASES = {
    "surge": gettext_lazy("a surge replica starts with the new launch"),
    "replace": gettext_lazy("a replica restarts with the new launch"),
    "cleanup": gettext_lazy("the surge replica is removed"),
    "done": gettext_lazy("done"),
}
# The states in which each action is offered (deployment.js applies the same list on live status changes).
ACTION_STATES = {
    "start": ("pending", "stopped", "failed"),
    "restart": ("starting", "running", "unhealthy", "failed"),
    "stop": ("pending", "starting", "running", "unhealthy", "failed"),
}


@role_required(VIEWER)
@require_safe
def deployment_list(request):
    queryset = (
        Deployment.objects.visible_to(request.user)
        .select_related("model", "replica_of")
        .prefetch_related("nodes", "npus__node")
    )
    filterset = DeploymentFilterSet(request.GET, queryset=queryset)
    page = Paginator(filterset.qs, 50).get_page(request.GET.get("page"))
    return render(
        request,
        "deployments/list.html",
        {
            "page": page,
            "filterset": filterset,
            "can_operate": has_role(request.user, OPERATOR),
            "gateway_url": gateway_url(request),
        },
    )


def visible_deployment(request, name):
    queryset = Deployment.objects.visible_to(request.user).select_related("model", "artifact__node")
    return get_object_or_404(queryset.prefetch_related("nodes", "npus__node"), name=name)


def _latest_launch(deployment):
    return (
        Operation.objects.filter(target=deployment.name, kind=OperationKind.DEPLOY)
        .order_by("-created")
        .first()
    )


def _stored_review(deployment) -> dict:
    """The plan kept at creation in the shape memory_bars() reads."""
    stored = deployment.plan or {}
    plan = stored.get("plan") or {}
    parts = services.parts_of(deployment)
    nodes = [{"node": part["node"], "logic_ids": part["launch"].get("logic_ids") or []} for part in parts]
    return {"memory_per_npu": plan.get("memory_per_npu"), "nodes": nodes, "plan": plan}


def _replica_set(deployment) -> dict:
    """The primary and its replicas with the latest rolling update, for the detail page of any of them."""
    primary = deployment.replica_of or deployment
    others = primary.replicas.exclude(desired_state=DesiredState.DELETED).prefetch_related("npus__node")
    # Prefill (or plain) rows by index, then a disaggregated deployment's decode rows (`<name>-d<j>`).
    members = sorted(
        [primary, *others],
        key=lambda row: (row.role == "decode", replicas.index_of(primary.name, row.name), row.name),
    )
    rollout = primary.rollouts.order_by("-pk").first()
    if len(members) == 1 and rollout is None:
        return {}
    return {
        "primary": primary,
        "members": [
            {"row": row, "npus": ", ".join(f"{npu.node.name}:{npu.logic_id}" for npu in row.npus.all())}
            for row in members
        ],
        # What the deployment wants against what serves: a replica short is seen, not hidden.
        "wanted": sum((primary.roles_wanted or {}).values()) or primary.replicas_wanted,
        "roles": bool(primary.roles_wanted),
        "running": sum(row.observed_state == DeploymentState.RUNNING for row in members),
        "rollout": rollout,
        "phase": ROLLOUT_PHASES.get(rollout.phase, "") if rollout else "",
        "rollout_colour": ROLLOUT_COLOURS.get(rollout.status, COLOUR_OFFLINE) if rollout else "",
    }


@role_required(VIEWER)
@require_safe
def deployment_detail(request, name):
    deployment = visible_deployment(request, name)
    launch = _latest_launch(deployment)
    review = _stored_review(deployment)
    spec = {key: value for key, value in (deployment.spec or {}).items() if key != "parts"}
    state_labels = {value: str(label) for value, label in DeploymentState.choices}
    state_labels["deleted"] = _("Deleted")
    benchmarks = Benchmark.objects.filter(deployment=deployment).order_by("-created")[:10]
    stage_key = next((key for key, title in STAGE_TITLES.items() if launch and title == launch.stage), "")
    # The launch's stage in the page's language: the operation stores its English title.
    launch_stage = _(STAGE_TITLES[stage_key]) if stage_key else (launch.stage if launch else "")
    context = {
        "launch_stage": launch_stage,
        "deployment": deployment,
        "spec": spec,
        "launch": launch,
        "stages": [(key, _(title)) for key, title in STAGE_TITLES.items()],
        "stage_key": stage_key,
        "log_start_seq": max(deployment.log_seq - LOG_LINES_ON_PAGE, 0),
        "review": review,
        "memory_bars": memory_bars(review),
        "warnings": (deployment.plan or {}).get("warnings") or [],
        "findings": findings_of(deployment),
        "npus": sorted(deployment.npus.all(), key=lambda npu: (npu.node.name, npu.logic_id or 0)),
        "can_operate": has_role(request.user, OPERATOR),
        "served_model": spec.get("served_model_name") or deployment.name,
        "gateway_url": deployment.endpoint or gateway_url(request),
        "benchmarks": benchmarks,
        "replica_set": _replica_set(deployment),
        "replica_count": (deployment.replica_of or deployment).replicas_wanted,
        "scale_roles": role_scale_rows(deployment.replica_of or deployment),
        "autoscale": block_of(deployment.replica_of or deployment, ""),  # a role's: on its Scale row
        "routing": _routing(deployment),
        "benchmark_form": BenchmarkForm(),
        "confirm_texts": _confirm_texts(deployment),
        "action_buttons": [
            {
                "action": action,
                "label": label,
                "when": " ".join(ACTION_STATES[action]),
                "shown": deployment.observed_state in ACTION_STATES[action],
            }
            for action, label in (("start", _("Start")), ("restart", _("Restart")), ("stop", _("Stop")))
        ],
        "page_config": {
            "name": deployment.name,
            "id": deployment.pk,
            "status": deployment.observed_state,
            "launchOperation": str(launch.pk) if launch else None,
            "stageKey": stage_key,
            "detailUrl": reverse("deployment-detail", args=[deployment.pk]),
            "logsUrl": reverse("deployment-logs", args=[deployment.pk]),
            "metricsHistoryUrl": reverse("deployment-metrics-history", args=[deployment.pk]),
            "findingsUrl": reverse("deployments:findings", args=[deployment.name]),
            "chatUrl": reverse("deployment-chat", args=[deployment.pk]),
            "operationUrl": reverse("operation-detail", args=["00000000-0000-0000-0000-000000000000"]),
            "stateLabels": state_labels,
            "stageTitles": {key: _(title) for key, title in STAGE_TITLES.items()},
            # A stage that arrives as its English title only (the operation's stage read back) finds its key.
            "stageKeys": {str(title): key for key, title in STAGE_TITLES.items()},
            "servedModel": spec.get("served_model_name") or deployment.name,
            "metrics": deployment.metrics or {},
            "metricsAt": deployment.metrics_at.isoformat() if deployment.metrics_at else None,
            "nodes": sorted({npu.node.name for npu in deployment.npus.all()}),
            "labels": {
                "time": _("Time"),
                "running": _("running"),
                "waiting": _("waiting"),
                "prompt": _("prompt"),
                "generation": _("generation"),
                "kv": _("KV cache"),
                "chatStats": _("TTFT {ttft} ms · {tokens} tokens · {rate} tokens/s"),
                "probeLines": _("show {n} probe lines (/health, /metrics)"),
            },
        },
    }
    return render(request, "deployments/detail.html", context)


def _routing(deployment) -> dict:
    """The gateway's routing policy (the primary's) and the prefix cache hit rate its engines report, over
    all replicas: the hits and queries of their latest scrapes, summed (docs/serving-plane.md §5)."""
    primary = deployment.replica_of or deployment
    rows = [primary, *primary.replicas.exclude(desired_state=DesiredState.DELETED)]
    figures = [row.metrics or {} for row in rows]
    queries = sum(f.get("prefix_cache_queries") or 0 for f in figures)
    hits = sum(f.get("prefix_cache_hits") or 0 for f in figures)
    return {
        "policy": primary.routing,
        "label": primary.get_routing_display(),
        "hit_rate": f"{100 * hits / queries:.1f}%" if queries else None,
    }


@role_required(VIEWER)
@require_safe
def deployment_replicas(request, name):
    """The replicas card alone: static/js/replicas_box.js swaps it in when a replica changes."""
    deployment = visible_deployment(request, name)
    context = {"deployment": deployment, "replica_set": _replica_set(deployment)}
    return render(request, "deployments/replicas_box.html", context)


@role_required(VIEWER)
@require_safe
def deployment_findings(request, name):
    """The findings box alone: the page swaps it in when a start fails or the engine turns unhealthy."""
    deployment = visible_deployment(request, name)
    return render(request, "deployments/findings.html", {"findings": findings_of(deployment)})


def _confirm_texts(deployment) -> dict:
    """What each action's confirm dialog says, and where it posts."""
    name = deployment.name
    texts = {
        "start": _("Start {name} again on its NPUs?"),
        "restart": _(
            "Restart {name}? Each replica loads its weights again after a new one serves, where free NPUs "
            "allow; without room for one, a deployment of one replica stops serving while it restarts."
        ),
        "stop": _("Stop {name}? Its endpoint stops answering; the NPUs stay reserved for it."),
        "delete": _("Delete {name}? The engine stops, its NPUs are released and the deployment is gone."),
    }
    return {
        action: {"text": text.format(name=name), "url": reverse("deployments:action", args=[name, action])}
        for action, text in texts.items()
    }


@role_required(OPERATOR)
@require_POST
def deployment_action(request, name, action):
    deployment = visible_deployment(request, name)
    command = ACTIONS.get(action)
    if command is None:
        return redirect("deployments:detail", name=name)
    try:
        if action == "restart":
            command(deployment, user=request.user, allow_downtime=request.POST.get(downtime.FIELD) == "on")
        else:
            command(deployment, user=request.user)
    except downtime.DowntimeNotAllowed as error:
        # Said before it runs, and done only once confirmed: the page asks again with the box to tick.
        context = {
            "deployment": deployment,
            "why": str(error),
            "downtime": {"seconds": downtime.start_seconds(deployment)},
        }
        return render(request, "deployments/restart_confirm.html", context, status=409)
    except services.DeploymentConflict as error:
        messages.error(request, str(error))
        return redirect("deployments:detail", name=name)
    done = {
        "stop": _("Stopping {name}."),
        "start": _("Starting {name}."),
        "restart": _("Restarting {name}."),
        "delete": _("Deleting {name}: the engine stops, then the NPUs are released."),
    }[action]
    # static/js/deployment.js takes a transition's message away once it settles (a restart's, once it moved)
    tags = f"{TRANSITION} restart" if action == "restart" else TRANSITION
    messages.success(request, done.format(name=name), extra_tags=tags)
    if action == "delete":
        return redirect("deployments:list")
    return redirect("deployments:detail", name=name)


@role_required(OPERATOR)
@require_POST
def deployment_benchmark(request, name):
    deployment = visible_deployment(request, name)
    form = BenchmarkForm(request.POST)
    serializer = BenchmarkRequestSerializer(
        data={
            "concurrency": request.POST.getlist("concurrency"),
            "prompt_len": request.POST.get("prompt_len"),
            "output_len": request.POST.get("output_len"),
            "requests": request.POST.get("requests"),
        }
    )
    if not serializer.is_valid():
        for field, detail in serializer.errors.items():
            for text in flatten(detail):
                messages.error(
                    request, f"{form.fields[field].label if field in form.fields else field}: {text}"
                )
        return redirect(reverse("deployments:detail", kwargs={"name": name}) + "#benchmark")
    try:
        benchmark = services.start_benchmark(deployment, dict(serializer.validated_data), user=request.user)
    except services.DeploymentConflict as error:
        messages.error(request, str(error))
        return redirect(reverse("deployments:detail", kwargs={"name": name}) + "#benchmark")
    return redirect("operations:detail", pk=benchmark.operation_id)


@role_required(VIEWER)
@require_safe
def benchmark_compare(request):
    """Benchmarks of several deployments side by side: one row per run and concurrency level."""
    visible = Deployment.objects.visible_to(request.user).values("pk")
    queryset = Benchmark.objects.filter(deployment__in=visible) | Benchmark.objects.filter(
        deployment__isnull=True
    )
    filterset = BenchmarkFilterSet(request.GET, queryset=queryset.order_by("-created"))
    chosen = [int(pk) for pk in request.GET.getlist("run") if pk.isdigit()]
    runs = list(filterset.qs[:100])
    rows = []
    for run in runs:
        for level in (run.results or {}).get("levels") or []:
            rows.append({"run": run, **level})
    series = [
        {
            "id": run.pk,
            "label": f"{run.deployment_name} · {run.created:%Y-%m-%d %H:%M}",
            "levels": (run.results or {}).get("levels") or [],
        }
        for run in runs
        if run.status == "succeeded" and (not chosen or run.pk in chosen)
    ][:8]
    return render(
        request,
        "deployments/benchmarks.html",
        {
            "runs": runs,
            "rows": rows,
            "series": series,
            "filterset": filterset,
            "chosen": chosen,
            "chart_labels": {"concurrency": _("Concurrency")},
        },
    )


@role_required(OPERATOR)
@require_POST
def resume_node(request, name):
    """Uncordon a drained node and start what its drain stopped (the button after an install)."""
    node = get_object_or_404(Node, name=name)
    started, busy = resume_after_drain(node, request.user)
    if busy:
        messages.warning(
            request,
            _("Still stopping, not started yet: %(names)s. Start them when they have stopped.")
            % {"names": ", ".join(d.name for d in busy)},
        )
    if started:
        text = _("%(node)s is uncordoned; starting again: %(names)s.") % {
            "node": node.name,
            "names": ", ".join(d.name for d in started),
        }
    else:
        text = _("%(node)s is uncordoned.") % {"node": node.name}
    messages.success(request, text, extra_tags=TRANSITION if started else "")
    back = request.POST.get("next", "")
    if back and url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        return redirect(back)
    return redirect("nodes:detail", name=node.name)
