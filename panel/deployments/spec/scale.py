"""Scale: a new replica count for a deployment, or for one role of a disaggregated one (`POST
/api/v1/deployments/{name}/scale/`, `ascend-panel scale NAME [--role decode] N`).

The deployment's spec as it runs with that one count changed, applied as any spec is (cause `scale`): the
same plan, diff, effect and revision, and the person's scale up or down recorded as a decision naming the
role (panel/deployments/revisions.py). A role is needed exactly when the deployment has roles.

The autoscaler's steps come this way too (cause `autoscale`, panel/deployments/autoscale/decider.py); a
person's scale of a count the autoscaler owns (the deployment's, or that role's) is refused.
"""

from __future__ import annotations

from django.utils.translation import gettext as _

from panel.core.domain.errors import InvalidInput
from panel.deployments.autoscale.config import CAUSE, block_of
from panel.deployments.models import Deployment
from panel.deployments.spec.apply import Change, Outcome, apply
from panel.deployments.spec.spec import parse_spec, spec_of


def scale(
    deployment: Deployment,
    replicas: int,
    role: str,
    user,
    *,
    dry_run: bool = False,
    allow_downtime: bool = False,
    cause: str = "scale",
) -> Outcome:
    """Apply the deployment's spec with `replicas` for `role` ("" for a plain deployment); 400 naming
    `role` when it does not match the deployment, `replicas` when the autoscaler owns the count (unless
    `cause` is the autoscaler's own step)."""
    primary = deployment.replica_of or deployment
    spec = spec_of(primary)
    if primary.roles_wanted and not role:
        said = _("{name} runs prefill and decode engines: name the role to scale (prefill or decode).")
        raise InvalidInput({"role": [said.format(name=primary.name)]})
    owner = block_of(primary, role)
    if owner and cause != CAUSE:
        raise InvalidInput({"replicas": [owned_message(primary, role, owner)]})
    if primary.roles_wanted:
        spec["roles"][role]["replicas"] = replicas
    else:
        if role:
            raise InvalidInput(
                {
                    "role": [
                        _("{name} has no roles (its replicas are plain): scale it without a role.").format(
                            name=primary.name
                        )
                    ]
                }
            )
        spec["replicas"] = replicas
        if replicas > 1 and "placement" in spec:
            # Each replica takes NPUs of its own: as many as the primary holds, on its node, and its own port.
            npus = spec["placement"]["npus"]
            spec["placement"]["npus"] = len(npus) if isinstance(npus, list) else npus
            spec["engine"].pop("port", None)
    change = Change(cause=cause, allow_downtime=allow_downtime)
    return apply(primary.name, parse_spec(spec, primary.name), user, dry_run=dry_run, change=change)


def owned_message(primary: Deployment, role: str, scale: dict) -> str:
    """Why a person's scale is refused: the autoscaler owns that count."""
    if role:
        return _(
            "{name}'s {role} engines scale with the load between {min} and {max}: the autoscaler owns their "
            "count. Change min and max of roles.{role}.autoscale, or turn it off."
        ).format(name=primary.name, role=role, min=scale["min"], max=scale["max"])
    return _(
        "{name} scales with the load between {min} and {max} replicas: the autoscaler owns the count. Change "
        "min and max, or turn autoscaling off."
    ).format(name=primary.name, min=scale["min"], max=scale["max"])
