"""Revisions: every spec applied to a deployment, numbered from 1 (`rollout history`, the History tab).

A change that alters what the deployment is (create, apply, the Edit page, scale, rollback) records one
`Revision` in the transaction that makes the change, under the primary's row lock: who, when, the changes
against the one before, the effect, and the whole spec as it then was (`GET ?format=spec`'s shape), so
`rollout undo --to-revision N` applies it again through the same plan, diff and effect.

One change at a time: apply notes the newest revision number before it plans, and `check_still` compares
it again once it holds the row lock (a compare-and-set): a change that another request made meanwhile
makes this one a 409 that names it. The number's unique constraint is the last word if two ever get past.

The outcome of a revision that started a rollout is the rollout's; of the newest other one, what its
deployment does now (running as wanted: succeeded; failed: failed); a revision that a newer one replaced
before it ended keeps the outcome it had then, or `superseded`.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from panel.core.domain.choices import (
    DecisionActor,
    DecisionKind,
    DecisionOutcome,
    DeploymentState,
    DesiredState,
)
from panel.core.domain.translated import in_language
from panel.deployments import decisions
from panel.deployments.conflicts import DeploymentConflict
from panel.deployments.models import Deployment, Revision, Rollout
from panel.deployments.reasons import current, english, part, spelled

IN_PROGRESS_STATES = (DeploymentState.PENDING, DeploymentState.STARTING, DeploymentState.STOPPING)
BROKEN_STATES = (DeploymentState.FAILED, DeploymentState.UNHEALTHY)


class ChangedMeanwhile(DeploymentConflict):
    """Another change reached the deployment between this one's reading and its writing (a 409)."""


def newest(primary: Deployment) -> Revision | None:
    return Revision.objects.filter(deployment=primary).order_by("-number").first()


def newest_number(primary: Deployment | None) -> int:
    """What apply notes before it plans; 0 for a deployment with no revision yet (or none at all)."""
    if primary is None or primary.pk is None:
        return 0
    found = Revision.objects.filter(deployment=primary).order_by("-number").values_list("number", flat=True)
    return found.first() or 0


def check_still(primary: Deployment, seen: int) -> None:
    """Under the primary's row lock: raise ChangedMeanwhile when a revision came after `seen`."""
    latest = newest(primary)
    if latest is not None and latest.number > seen:
        who = latest.username or _("the panel")
        raise ChangedMeanwhile(
            _(
                "{name} was changed meanwhile by another request (revision {number} by {user}); read it "
                "again and apply once more if your change is still wanted."
            ).format(name=primary.name, number=latest.number, user=who)
        )


def check_no_rollout(deployment: Deployment) -> None:
    """409 naming the rolling update under way on the deployment (or on its primary)."""
    primary = deployment.replica_of if deployment.replica_of is not None else deployment
    running = primary.rollouts.filter(status=Rollout.RUNNING).select_related("created_by").first()
    if running is not None:
        raise DeploymentConflict(running_text(primary, running))


def running_text(primary: Deployment, rollout: Rollout) -> str:
    """The 409 of a change that arrives while a rolling update runs: what runs, and how to wait for it."""
    revision = Revision.objects.filter(rollout=rollout).values_list("number", flat=True).first()
    who = rollout.created_by.get_username() if rollout.created_by else _("the panel")
    head = (
        _(
            "A rolling update of {name} is under way (revision {number}, rollout {id} by {user}, "
            "{done}/{total} replaced)"
        )
        if revision is not None
        else _("A rolling update of {name} is under way (rollout {id} by {user}, {done}/{total} replaced)")
    ).format(
        number=revision, name=primary.name, id=rollout.pk, user=who, done=rollout.done, total=rollout.total
    )
    return _(
        "{head}: one change at a time. Apply again once it has ended (`ascend-panel apply --wait-for-lock` "
        "waits for it)."
    ).format(head=head)


def record(
    primary: Deployment,
    spec: dict[str, Any],
    user,
    *,
    changes: list[dict[str, Any]],
    effect: str,
    cause: str = "apply",
    restored: int | None = None,
    rollout: Rollout | None = None,
) -> Revision:
    """Number the spec just applied to `primary` (in the change's transaction, under its row lock)."""
    before = newest(primary)
    if before is not None and before.outcome == Revision.IN_PROGRESS:
        outcome, parts = outcome_of(before)
        before.outcome = Revision.SUPERSEDED if outcome == Revision.IN_PROGRESS else outcome
        before.message_parts, before.message = parts, english(parts)
        before.save(update_fields=["outcome", "message", "message_parts"])
    known = user is not None and user.is_authenticated
    revision = Revision.objects.create(
        deployment=primary,
        number=(before.number if before is not None else 0) + 1,
        spec=spec,
        changes=changes,
        effect=effect,
        cause=cause,
        restored=restored,
        rollout=rollout,
        created_by=user if known else None,
        username=user.get_username() if known else "",
    )
    _record_decisions(primary, revision, user if known else None)
    return revision


def _record_decisions(primary: Deployment, revision: Revision, user) -> None:
    """The revision as a recorded decision (docs/serving-plane.md §2), and a person's new replica count as
    their scale up or down. The scale page's revision is that scale alone."""
    done = {
        "actor": DecisionActor.USER if user else DecisionActor.LEADER,
        "user": user,
        "outcome": DecisionOutcome.DONE,
    }
    if revision.cause == "autoscale":
        return  # the autoscaler records its own step with its figures (panel/deployments/autoscale)
    # One per role of a disaggregated deployment (each line names its role), one for plain replicas.
    scaled = [c for c in revision.changes if c["field"] == "replicas" and c["from"] != c["to"]]
    for line in scaled if user is not None else []:
        kind = DecisionKind.SCALE_UP if line["to"] > line["from"] else DecisionKind.SCALE_DOWN
        role = line.get("role") or ""
        if role:
            why = part(
                gettext_noop("{role} replicas set to {to} (were {was})."),
                role=role, to=line["to"], was=line["from"],
            )  # fmt: skip
        else:
            why = part(gettext_noop("Replicas set to {to} (were {was})."), to=line["to"], was=line["from"])
        numbers = {"from": line["from"], "to": line["to"], "revision": revision.number}
        decisions.record(primary, kind, reason=[why], figures=numbers, role=role, **done)
    if scaled and user is not None and revision.cause == "scale":
        return
    if revision.cause == "create":
        why = part(gettext_noop("Revision {n}: created."), n=revision.number)
    elif revision.restored is not None:
        why = part(
            gettext_noop("Revision {n} restores revision {old}."), n=revision.number, old=revision.restored
        )
    elif revision.changes:
        fields = ", ".join(sorted({c["field"] for c in revision.changes}))
        why = part(gettext_noop("Revision {n} applied: {fields} changed."), n=revision.number, fields=fields)
    else:
        why = part(gettext_noop("Revision {n} applied without changes."), n=revision.number)
    decisions.record(
        primary, DecisionKind.REVISION, reason=[why], figures={"revision": revision.number}, **done
    )


def outcome_of(revision: Revision) -> tuple[str, list[dict]]:
    """(outcome, message as reason parts: panel/deployments/reasons.py) of a revision now."""
    if revision.outcome != Revision.IN_PROGRESS:
        return revision.outcome, spelled(revision.message_parts, revision.message)
    rollout = revision.rollout
    if rollout is not None:
        mapped = {Rollout.RUNNING: Revision.IN_PROGRESS, Rollout.SUCCEEDED: Revision.SUCCEEDED}
        return mapped.get(rollout.status, Revision.FAILED), spelled(rollout.message_parts, rollout.message)
    primary = revision.deployment
    state, wanted = primary.observed_state, primary.desired_state
    if state in BROKEN_STATES:
        return Revision.FAILED, current(primary)
    if state in IN_PROGRESS_STATES or primary.rollouts.filter(status=Rollout.RUNNING).exists():
        return Revision.IN_PROGRESS, []
    done = (wanted == DesiredState.RUNNING and state == DeploymentState.RUNNING) or (
        wanted == DesiredState.STOPPED and state == DeploymentState.STOPPED
    )
    return (Revision.SUCCEEDED if done else Revision.IN_PROGRESS), []


def spec_of_revision(primary: Deployment, number: int) -> dict[str, Any] | None:
    found = Revision.objects.filter(deployment=primary, number=number).values_list("spec", flat=True).first()
    return dict(found) if found is not None else None


def history(primary: Deployment) -> list[dict[str, Any]]:
    """Every revision, newest first, as the API and the History tab show them."""
    rows = Revision.objects.filter(deployment=primary).select_related("rollout", "deployment")
    answer = []
    for revision in rows.order_by("-number"):
        outcome, parts = outcome_of(revision)
        answer.append(
            {
                "number": revision.number,
                "created": revision.created,
                "user": revision.username,
                "cause": revision.cause,
                "restored": revision.restored,
                "effect": revision.effect,
                "changes": revision.changes,
                "outcome": outcome,
                "message": english(parts),
                "message_display": in_language(parts),
                "rollout": revision.rollout_id,
                "spec": revision.spec,
            }
        )
    return answer
