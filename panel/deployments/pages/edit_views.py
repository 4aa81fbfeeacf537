"""Changing a deployment from its page: Edit, Scale and Rollback.

Each builds a spec (panel/deployments/spec/spec.py) from the deployment as it is (`spec_of`) with what the
person changed laid over it, and hands it to panel.deployments.spec.apply, the code behind `PUT
/api/v1/deployments/{name}/`: first as a dry run, whose changes, effect and planner warnings the page
shows, then for real once they press Apply. Rollback applies the spec kept before the last change
(panel.deployments.spec.undo). Operators and admins only; the admin-only flags are refused by the planner.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from panel.accounts.roles import OPERATOR
from panel.catalog.models import SERVABLE_FORMATS, ModelArtifact
from panel.core.domain.errors import InvalidInput, NotAllowed
from panel.core.views import TRANSITION, role_required
from panel.deployments import downtime, revisions, services
from panel.deployments.autoscale.config import block_of
from panel.deployments.launch.launch_tuning import AdminOnlyEnv
from panel.deployments.models import Deployment
from panel.deployments.pages.autoscale_form import (
    AUTOSCALE_SPEC_TO_FORM,
    ROLE_AUTOSCALE_SPEC_TO_FORM,
    autoscale_from_form,
    autoscale_initial,
)
from panel.deployments.pages.forms import (
    ALLOWED_FLAG_NAMES,
    EditForm,
    choices_from_nodes,
    env_as_text,
    flags_as_text,
    nodes_from_choices,
)
from panel.deployments.pages.idle_form import (
    IDLE_SPEC_TO_FORM,
    idle_from_form,
    idle_initial,
    sleep_refusal_of,
)
from panel.deployments.pages.scale_roles import counts_text, has_roles, role_scale_rows
from panel.deployments.pages.topology_form import (
    ROLE_PARALLEL,
    SPLIT,
    TOPOLOGY_SPEC_TO_FORM,
    connector_offers,
    roles_from,
    topology_initial,
)
from panel.deployments.pages.views import visible_deployment
from panel.deployments.pages.wizard_state import flatten
from panel.deployments.placement.npus import held_npus
from panel.deployments.spec import undo
from panel.deployments.spec.apply import Change, Outcome, apply
from panel.deployments.spec.request import ENGINE_SETTINGS, AdminOnlyFlag
from panel.deployments.spec.roles_spec import MAX_ROLE_REPLICAS, ROLES, connector_of, roles_of
from panel.deployments.spec.scale import scale
from panel.deployments.spec.spec import nodes_of, parse_spec, spec_of
from panel.nodes.models import Node
from workers.engine.launch.flags import CODE_LOADING_FLAGS

EFFECTS = {
    "none": gettext_lazy("Nothing changes."),
    "restart": gettext_lazy(
        "The engine restarts in place with the new settings: it does not serve meanwhile."
    ),
    "move_npus": gettext_lazy(
        "The engine stops and starts again on the new NPUs: it does not serve meanwhile."
    ),
    "rolling": gettext_lazy(
        "Rolling update: the replicas take the new settings one at a time (a surge replica first when NPUs "
        "are free), so the others keep serving."
    ),
    "scale": gettext_lazy("Replicas are added or removed; the running ones are not touched."),
    "start": gettext_lazy("The engine starts."),
    "stop": gettext_lazy("The engine stops; the new settings are kept for its next start."),
    "create": gettext_lazy("The deployment is created."),
    "topology": gettext_lazy("The prefill and decode pools change as the diff shows."),
}
KEPT_FOR_NEXT_START = gettext_lazy("The engine is stopped: it takes the new settings when it starts again.")
# Where the apply's field names land on the edit form.
SPEC_FIELD_TO_FORM = {
    "nodes": "npus",
    "placement": "npus",
    "placement.npus": "npus",
    "model": "artifact",
    "path": "artifact",
    **TOPOLOGY_SPEC_TO_FORM,
    **AUTOSCALE_SPEC_TO_FORM,
    **ROLE_AUTOSCALE_SPEC_TO_FORM,
    **IDLE_SPEC_TO_FORM,
}


class Refused(Exception):
    """The apply refused the spec: {field: [texts]} (a field may be "" for the whole spec)."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__(errors)
        self.errors = errors


def run(name: str, raw: dict[str, Any], user, *, dry_run: bool, change: Change | None = None) -> Outcome:
    """apply() of `raw`, its refusals as Refused."""
    try:
        return apply(name, parse_spec(raw, name), user, dry_run=dry_run, change=change)
    except AdminOnlyFlag as error:
        raise Refused({"engine.extra_flags": [str(error.detail)]}) from None
    except AdminOnlyEnv as error:
        raise Refused({"engine.env": [str(error.detail)]}) from None
    except InvalidInput as error:
        detail = error.detail if isinstance(error.detail, dict) else {"": error.detail}
        raise Refused(_by_dotted_field(detail)) from None
    except services.DeploymentConflict as error:
        raise Refused({"": [str(error)]}) from None


def _by_dotted_field(detail: dict, prefix: str = "") -> dict[str, list[str]]:
    """{"engine": {"port": [...]}} (the spec's own check) as {"engine.port": [...]} (the planner's)."""
    out: dict[str, list[str]] = {}
    for key, texts in detail.items():
        name = f"{prefix}{key}"
        if isinstance(texts, dict):
            out.update(_by_dotted_field(texts, f"{name}."))
        else:
            out[name] = flatten(texts)
    return out


def outcome_context(outcome: Outcome) -> dict[str, Any]:
    """What the diff box shows: each change, what it does to the engine, and the planner's warnings."""
    text = EFFECTS.get(outcome.effect, outcome.effect)
    if outcome.effect == "none" and outcome.changes:
        text = KEPT_FOR_NEXT_START
    return {
        "changes": outcome.changes,
        "effect": outcome.effect,
        "effect_text": text,
        "warnings": outcome.warnings,
        "unchanged": outcome.result == "unchanged",
        # The change stops serving (no room for a surge): Apply needs the box ticked (downtime.py).
        "downtime": next((w for w in outcome.warnings if w.get("code") == downtime.CODE), None),
    }


def _artifacts(user, deployment: Deployment):
    ready = ModelArtifact.objects.visible_to(user).filter(ready=True, format__in=SERVABLE_FORMATS)
    if deployment.artifact_id:
        ready = ready | ModelArtifact.objects.filter(pk=deployment.artifact_id)
    return ready.select_related("model", "node").order_by("model__name", "node__name")


def _npu_choices(user, deployment: Deployment) -> list[tuple[str, str]]:
    """Every NPU the deployment may take: its own and the free ones (none with replicas or autoscaling: see
    EditForm)."""
    if deployment.replicas_wanted > 1 or (block_of(deployment, "") or {}).get("max", 1) > 1:
        return []
    holders = held_npus(ignore=deployment)
    choices = []
    for node in Node.objects.visible_to(user).prefetch_related("npus").order_by("name"):
        npus = [npu for npu in node.npus.all() if npu.logic_id is not None]
        if not npus:
            choices.append((f"{node.name}:cpu", f"{node.name} · CPU"))
        for npu in sorted(npus, key=lambda npu: npu.logic_id):
            label = f"{node.name}:{npu.logic_id}"
            if npu.pk in holders:
                label += " · " + _("held by {name}").format(name=holders[npu.pk])
            choices.append((f"{node.name}:{npu.logic_id}", label))
    return choices


def _initial(deployment: Deployment) -> dict[str, Any]:
    spec = spec_of(deployment)
    engine = dict(spec["engine"])
    engine["extra_flags"] = flags_as_text(engine.get("extra_flags") or {})
    engine["env"] = env_as_text(engine.get("env") or {})
    topology = {
        "roles": roles_of(deployment),
        "replicas": deployment.replicas_wanted,
        "kv_connector": connector_of(deployment),
    }
    return {
        **engine,
        "artifact": deployment.artifact_id,
        "npus": choices_from_nodes(nodes_of(deployment)),
        "runtime": spec["runtime"],
        "image": spec.get("image", ""),
        "routing": deployment.routing,
        **topology_initial(topology, _home_node(deployment)),
        **autoscale_initial(deployment),
        **idle_initial(deployment),
    }


def _home_node(deployment: Deployment) -> str:
    """The node the deployment runs on first (where its connectors are looked up)."""
    nodes = nodes_of(deployment)
    return nodes[0]["node"] if nodes else ""


def spec_from_form(deployment: Deployment, data: dict[str, Any]) -> dict[str, Any]:
    """The deployment's spec with the form's settings laid over it (replicas and state stay; with autoscale
    the count is the autoscaler's)."""
    spec = spec_of(deployment)
    spec.pop("path", None)
    spec["model"] = data["artifact"].model.name
    spec["artifact"] = data["artifact"].pk
    spec["engine"] = {key: data[key] for key in ENGINE_SETTINGS}
    if deployment.replicas_wanted > 1:
        spec["engine"].pop("port")  # each replica has a port of its own
    spec["runtime"] = data["runtime"]
    spec["image"] = data["image"] if data["runtime"] == "container" else ""
    spec["routing"] = data["routing"]
    spec["idle"] = idle_from_form(data)
    if data.get("topology") == SPLIT:
        return _with_roles(spec, data)
    spec.pop("roles", None)
    spec.pop("kv_connector", None)
    if "npus" in data:
        nodes = nodes_from_choices(data["npus"])
        shares = (spec.pop("placement", None) or {}).get("share")  # placement/hbm.py: it keeps sharing
        spec.pop("nodes", None)
        if len(nodes) == 1:
            spec["placement"] = {
                "node": nodes[0]["node"],
                "npus": nodes[0]["npus"],
                **({"share": True} if shares else {}),
            }
        else:
            spec["nodes"] = nodes
    if data.get("replicas") and data["replicas"] != spec.get("replicas", 1):
        spec["replicas"] = data["replicas"]
        placement = spec.get("placement")
        if data["replicas"] > 1 and placement and isinstance(placement["npus"], list):
            placement["npus"] = len(placement["npus"])  # each replica takes NPUs of its own
            spec["engine"].pop("port", None)
    return _with_autoscale(spec, autoscale_from_form(data))


def _with_roles(spec: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    """Prefill and decode pools as the form says, each role's TP and DP from its fields (the shared engine
    settings carry none). A TP or DP left empty, or left as it ran while the role's NPUs per engine changed,
    is the planner's to pick for the new NPUs. A role that scales with the load takes its `autoscale:`
    from its fields, and its count stays the autoscaler's."""
    running = spec.get("roles") or {}
    roles = roles_from(data)
    for role in ROLES:
        before = running.get(role) or {}
        engine = dict(before.get("engine") or {})
        asked = roles[role].get("engine") or {}
        moved = (before.get("placement") or {}).get("npus") != roles[role]["placement"]["npus"]
        for setting in ROLE_PARALLEL.values():
            given = asked.get(setting)
            if given is None or (moved and given == engine.get(setting)):
                engine.pop(setting, None)
            else:
                engine[setting] = given
        roles[role].pop("engine", None)
        if engine:
            roles[role]["engine"] = engine
        scale = autoscale_from_form(data, role)
        if scale is not None:
            roles[role]["autoscale"] = scale
            roles[role].pop("replicas", None)  # the autoscaler's: the count there is stays, moved into range
    for key in ("placement", "nodes", "replicas", "autoscale"):
        spec.pop(key, None)
    for key in ("tensor_parallel_size", "data_parallel_size"):
        spec["engine"].pop(key, None)
    spec["roles"] = roles
    spec["kv_connector"] = data.get("kv_connector") or None
    return spec


def _with_autoscale(spec: dict[str, Any], scale: dict[str, Any] | None) -> dict[str, Any]:
    """`autoscale:` as the form says; the replicas it adds each take NPUs of their own on the node."""
    spec.pop("autoscale", None)
    if scale is None:
        return spec
    spec["autoscale"] = scale
    spec.pop("replicas", None)  # the autoscaler's: the count there is stays, moved into the range
    placement = spec.get("placement")
    if isinstance(scale.get("max"), int) and scale["max"] > 1 and placement:
        if isinstance(placement["npus"], list):
            placement["npus"] = len(placement["npus"])
        spec["engine"].pop("port", None)
    return spec


def _attach(form: EditForm, errors: dict[str, list[str]]) -> None:
    for key, texts in errors.items():
        name = SPEC_FIELD_TO_FORM.get(key, key.removeprefix("engine."))
        for text in texts:
            form.add_error(name if name in form.fields else None, text)


@role_required(OPERATOR)
def deployment_edit(request, name):
    """GET: the form filled from the deployment. POST: the dry run's diff; with `confirm`, the apply."""
    deployment = visible_deployment(request, name)
    if deployment.replica_of_id:
        messages.error(
            request,
            _("Edit the primary, {name}: its replicas follow.").format(name=deployment.replica_of.name),
        )
        return redirect("deployments:detail", name=name)
    home = Node.objects.filter(name=_home_node(deployment)).first()
    offers = connector_offers(home) if home is not None else []
    form_args = {
        "artifacts": _artifacts(request.user, deployment),
        "npu_choices": _npu_choices(request.user, deployment),
        "offers": offers,
        "nodes": [(node.name, node.name) for node in Node.objects.visible_to(request.user).order_by("name")],
    }
    context: dict[str, Any] = {
        "deployment": deployment,
        "offers": offers,
        "split_usable": any(offer.usable for offer in offers),
        "topology_node": home.name if home is not None else "",
        "sleep_refused": sleep_refusal_of(deployment),
    }
    if request.method != "POST":
        form = EditForm(initial=_initial(deployment), **form_args)
    else:
        form = EditForm(request.POST, **form_args)
        if form.is_valid():
            spec = spec_from_form(deployment, form.cleaned_data)
            confirmed = "confirm" in request.POST
            change = Change(cause="edit", allow_downtime=downtime.FIELD in request.POST)
            try:
                outcome = run(name, spec, request.user, dry_run=not confirmed, change=change)
            except Refused as refused:
                _attach(form, refused.errors)
            else:
                if confirmed:
                    return _applied(request, deployment, outcome)
                context.update(outcome_context(outcome))
                context["previewed"] = True
    context.update(
        form=form,
        allowed_flags=ALLOWED_FLAG_NAMES,
        admin_only_flags=sorted(CODE_LOADING_FLAGS),
        form_errors=[
            (str(form.fields[key].label) if key in form.fields else "", text)
            for key, texts in form.errors.items()
            for text in texts
        ],
    )
    return render(request, "deployments/edit.html", context)


def _applied(request, deployment: Deployment, outcome: Outcome):
    if outcome.result == "unchanged":
        messages.info(
            request,
            _("Nothing to change: {name} already runs with these settings.").format(name=deployment.name),
        )
    else:
        text = _("Applied to {name}: {effect}").format(
            name=deployment.name, effect=outcome_context(outcome)["effect_text"]
        )
        messages.success(request, text, extra_tags=TRANSITION)
    return redirect("deployments:detail", name=deployment.name)


# Refusals of a change made from a page: each names its fields (InvalidInput) or the whole change (a flag
# or variable only an admin may set, a conflict).
REFUSALS = (InvalidInput, NotAllowed, services.DeploymentConflict)


@role_required(OPERATOR)
def deployment_scale(request, name):
    """POST: set the replica count through scale(), of one role (`role`) for a deployment with roles. A
    plain deployment's refusal is a message on its page; a role's is shown on that role's count, on the
    Scale page (GET shows it too)."""
    deployment = visible_deployment(request, name)
    primary = deployment.replica_of or deployment
    role = request.POST.get("role", "")
    if request.method != "POST" or (primary.roles_wanted and role not in ROLES):
        if not primary.roles_wanted:
            return redirect("deployments:detail", name=name)
        return _scale_page(request, deployment, primary)
    if block_of(primary, ""):  # a plain deployment's count; a role's is refused on its own count
        messages.error(request, autoscaled_message(primary))
        return redirect("deployments:detail", name=name)
    wanted = request.POST.get("replicas", "")
    try:
        if not wanted.isascii() or not wanted.isdigit():
            most = MAX_ROLE_REPLICAS if primary.roles_wanted else 64
            raise InvalidInput(
                {"replicas": [_("Replicas: give a whole number from 1 to {max}.").format(max=most)]}
            )
        outcome = scale(deployment, int(wanted), role, request.user)
    except REFUSALS as error:
        texts = flatten(getattr(error, "detail", None) or str(error))
        if primary.roles_wanted:
            # Only this role's count changed: whatever refused it (no room, the autoscaler) is about it.
            return _scale_page(request, deployment, primary, {role: texts}, {role: wanted}, status=400)
        for text in texts:
            messages.error(request, text)
        return redirect("deployments:detail", name=name)
    return _applied(request, primary, outcome)


def _scale_page(request, deployment, primary, refused=None, asked=None, status=200):
    context = {"deployment": deployment, "scale_roles": role_scale_rows(primary, refused, asked)}
    return render(request, "deployments/scale.html", context, status=status)


def autoscaled_message(primary: Deployment) -> str:
    scale = block_of(primary, "") or {}  # (shown only for an autoscaled deployment)
    return _(
        "{name} scales with the load between {min} and {max} replicas: the autoscaler owns the count. Change "
        "min and max on Edit, or turn autoscaling off there."
    ).format(name=primary.name, min=scale.get("min"), max=scale.get("max"))


@role_required(OPERATOR)
def deployment_rollback(request, name):
    """GET: what going back to the previous spec (or to revision `?to_revision=N`, the History tab's)
    changes. POST: go back."""
    deployment = visible_deployment(request, name)
    number = request.GET.get("to_revision", "")
    to_revision = int(number) if number.isascii() and number.isdigit() else None
    context: dict[str, Any] = {"deployment": deployment, "errors": [], "to_revision": to_revision}
    context.update(_counts_then_and_now(deployment, to_revision))
    try:
        outcome = undo.undo(
            deployment,
            request.user,
            dry_run=request.method != "POST",
            to_revision=to_revision,
            allow_downtime=downtime.FIELD in request.POST,
        )
    except REFUSALS as error:
        detail = getattr(error, "detail", None) or str(error)
        context["errors"] = flatten(detail)
    else:
        if request.method == "POST":
            return _applied(request, deployment, outcome)
        context.update(outcome_context(outcome))
    return render(request, "deployments/rollback.html", context)


def _counts_then_and_now(deployment: Deployment, to_revision: int | None) -> dict[str, str]:
    """The replica counts now and in the spec the rollback goes back to, when either has roles: a
    revision of a disaggregated deployment reads by its pools ("prefill 1 · decode 2")."""
    primary = deployment.replica_of or deployment
    if to_revision is not None:
        then = revisions.spec_of_revision(primary, to_revision)
    else:
        then = dict(primary.previous_spec or {})
    now = spec_of(primary)
    if not (has_roles(then) or has_roles(now)):
        return {}
    return {"counts_now": counts_text(now), "counts_then": counts_text(then) if then else ""}
