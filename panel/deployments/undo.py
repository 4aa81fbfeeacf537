"""Rollback: apply again the spec a deployment had before the last apply that changed it.

apply() keeps that spec on the primary (`Deployment.previous_spec`, as `spec_of` gave it) in the same
transaction as the change, so a rollback is one more apply through the same plan, diff and effect; and as
with `kubectl rollout undo`, rolling back twice returns to where it was.
"""

from __future__ import annotations

from django.utils.translation import gettext as _
from rest_framework import serializers

from panel.deployments.apply import Outcome, apply
from panel.deployments.models import Deployment
from panel.deployments.spec import parse_spec


def can_undo(deployment: Deployment) -> bool:
    return bool(deployment.previous_spec)


def undo(deployment: Deployment, user, *, dry_run: bool = False) -> Outcome:
    """Apply the previous spec. 400 when there is none; otherwise what apply raises."""
    if not can_undo(deployment):
        raise serializers.ValidationError(
            {
                "previous_spec": [
                    _(
                        "{name} has no earlier spec to roll back to: "
                        "nothing was applied to it since it was made."
                    ).format(name=deployment.name)
                ]
            }
        )
    spec = parse_spec(dict(deployment.previous_spec), deployment.name)
    return apply(deployment.name, spec, user, dry_run=dry_run)
