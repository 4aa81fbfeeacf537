"""Rollback: apply again the spec a deployment had before the last apply that changed it.

apply() keeps that spec on the primary (`Deployment.previous_spec`, as `spec_of` gave it) in the same
transaction as the change, so a rollback is one more apply through the same plan, diff and effect; and as
with `kubectl rollout undo`, rolling back twice returns to where it was.
"""

from __future__ import annotations

from django.utils.translation import gettext as _

from panel.core.domain.errors import InvalidInput
from panel.deployments import revisions
from panel.deployments.models import Deployment
from panel.deployments.spec.apply import Change, Outcome, apply
from panel.deployments.spec.spec import parse_spec


def can_undo(deployment: Deployment) -> bool:
    return bool(deployment.previous_spec)


def undo(
    deployment: Deployment,
    user,
    *,
    dry_run: bool = False,
    to_revision: int | None = None,
    allow_downtime: bool = False,
) -> Outcome:
    """Apply the previous spec, or revision `to_revision`'s. 400 when there is none; otherwise what apply
    raises."""
    change = Change(cause="rollback", restored=to_revision, allow_downtime=allow_downtime)
    if to_revision is not None:
        raw = revisions.spec_of_revision(deployment, to_revision)
        if raw is None:
            raise InvalidInput(
                {
                    "to_revision": [
                        _("{name} has no revision {number}: `rollout history` lists them.").format(
                            name=deployment.name, number=to_revision
                        )
                    ]
                }
            )
        return apply(deployment.name, parse_spec(raw, deployment.name), user, dry_run=dry_run, change=change)
    if not can_undo(deployment):
        raise InvalidInput(
            {
                "previous_spec": [
                    _(
                        "{name} has no earlier spec to roll back to: "
                        "nothing was applied to it since it was made."
                    ).format(name=deployment.name)
                ]
            }
        )
    spec = parse_spec(dict(deployment.previous_spec or {}), deployment.name)
    newest = revisions.newest_number(deployment)
    change.restored = newest - 1 if newest > 1 else None  # the spec before the last change
    return apply(deployment.name, spec, user, dry_run=dry_run, change=change)
