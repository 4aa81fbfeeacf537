"""Changes that would stop serving: said before they run, and done only once confirmed.

A rolling change (an edit, a rollback, a restart) starts a surge replica first where free NPUs allow, so the
old one goes only once the new one serves. Where no surge fits and the deployment serves from one replica
alone, that replica restarts in place and nothing serves meanwhile: the dry run (the Edit page's review,
`apply --dry-run`) warns "this change stops serving for about N s", and the change itself is refused
(409, `errors.allow_downtime`) unless confirmed: `allow_downtime=true` in the API, `--allow-downtime` in
the CLI, the checkbox on the Edit page. N is how long this deployment's last start took (its launch
operation), or DEFAULT_START_S when it has none.

A change that finds no room for a surge because another change began meanwhile (its surge took the free
NPUs, or the next replica name) is refused for that other change, not for downtime: parallel pipelines saw
"stops serving ... confirm" while a rollout was what stood in the way, and `--wait-for-lock` does not retry
a refusal that asks for a confirmation.
"""

from __future__ import annotations

from typing import NoReturn

from django.utils.translation import gettext as _

from panel.core.domain.choices import DeploymentState, OperationKind, OperationStatus
from panel.deployments import revisions
from panel.deployments.conflicts import DeploymentConflict
from panel.deployments.models import Deployment
from panel.deployments.rollouts import replicas
from panel.operations.models import Operation

DEFAULT_START_S = 60
CODE = "downtime"
FIELD = "allow_downtime"


class DowntimeNotAllowed(DeploymentConflict):
    """The change cannot surge and would stop serving: confirm with allow_downtime (a 409 naming it)."""

    field = FIELD


def serving_rows(primary: Deployment) -> int:
    rows = [primary, *replicas.members(primary)]
    return sum(row.observed_state == DeploymentState.RUNNING for row in rows)


def start_seconds(deployment: Deployment) -> int:
    """How long its last successful launch took, in whole seconds."""
    launch = (
        Operation.objects.filter(
            target=deployment.name,
            kind=OperationKind.DEPLOY,
            status=OperationStatus.SUCCEEDED,
            started__isnull=False,
            finished__isnull=False,
        )
        .order_by("-finished")
        .first()
    )
    if launch is None:
        return DEFAULT_START_S
    return max(1, round((launch.finished - launch.started).total_seconds()))


def stops_serving(primary: Deployment, why_no_surge: str | None) -> int | None:
    """About how many seconds the change stops serving, or None when something keeps serving."""
    if why_no_surge is None or serving_rows(primary) != 1:
        return None
    return start_seconds(primary)


def warning(primary: Deployment, seconds: int, why_no_surge: str) -> dict:
    message = _(
        "This change stops serving {name} for about {seconds} s: {why} Its only serving replica restarts "
        "in place. Confirm to go ahead (allow_downtime=true, --allow-downtime, or the box on the Edit page)."
    ).format(name=primary.name, seconds=seconds, why=why_no_surge)
    return {"code": CODE, "level": "warning", "message": message, "seconds": seconds}


def check(
    primary: Deployment, why_no_surge: str | None, *, allowed: bool, dry_run: bool, seen: int | None = None
) -> dict | None:
    """The downtime warning of a change (None when it keeps serving); raises DowntimeNotAllowed for a
    real change that would stop serving and was not confirmed, unless another change (a rollout under way,
    or a revision after `seen`, the newest the change read) came first: that one is named instead."""
    seconds = stops_serving(primary, why_no_surge)
    if seconds is None or why_no_surge is None:
        return None
    said = warning(primary, seconds, why_no_surge)
    if not allowed and not dry_run:
        refuse(primary, said, seen=seen)
    return said


def refuse(primary: Deployment, said: dict, *, seen: int | None = None) -> NoReturn:
    """Raise for a change that would stop serving and was not confirmed: the other change that came first
    (a rollout under way, a revision after `seen`) when there is one, else DowntimeNotAllowed."""
    revisions.check_no_rollout(primary)
    if seen is not None:
        revisions.check_still(primary, seen)
    raise DowntimeNotAllowed(said["message"])
