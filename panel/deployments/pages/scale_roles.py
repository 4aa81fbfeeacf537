"""What the Scale form and the Roll back page show of a disaggregated deployment's roles
(docs/serving-plane.md §1): one count per role, since `scale()` changes one role at a time, and a spec's
counts as one line ("prefill 1 · decode 2") so a revision of such a deployment reads by its pools. A role
whose count the autoscaler owns shows its range instead of a count to set."""

from __future__ import annotations

from typing import Any

from django.utils.translation import ngettext, pgettext

from panel.core.domain.choices import DeploymentRole
from panel.deployments.autoscale.config import block_of
from panel.deployments.models import Deployment
from panel.deployments.spec.roles_spec import MAX_ROLE_REPLICAS, ROLES


def role_scale_rows(
    primary: Deployment, refused: dict[str, list[str]] | None = None, asked: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """One row per role of `primary` with its wanted count, or the count `asked` of a role whose scale
    was `refused` (with the refusals), so the person sees what they typed beside why it was refused. An
    empty list for a plain deployment, whose form stays the single count."""
    wanted = primary.roles_wanted or {}
    if not wanted:
        return []
    refused = refused or {}
    asked = asked or {}
    return [
        {
            "role": role,
            "label": DeploymentRole(role).label,
            "count": asked.get(role, int(wanted.get(role) or 0)),
            "max": MAX_ROLE_REPLICAS,
            "errors": refused.get(role, []),
            "autoscale": block_of(primary, role),
        }
        for role in ROLES
    ]


def role_count_text(role: str, count: int) -> str:
    if role == DeploymentRole.PREFILL:
        return pgettext("role count", "prefill {n}").format(n=count)
    return pgettext("role count", "decode {n}").format(n=count)


def counts_text(spec: dict[str, Any] | None) -> str:
    """A spec's replica counts: "prefill 1 · decode 2" with roles, "3 replicas" without."""
    spec = spec or {}
    roles = spec.get("roles") or {}
    if roles:
        return " · ".join(
            role_count_text(role, int((roles.get(role) or {}).get("replicas") or 0)) for role in ROLES
        )
    count = int(spec.get("replicas") or 1)
    return ngettext("{n} replica", "{n} replicas", count).format(n=count)


def has_roles(spec: dict[str, Any] | None) -> bool:
    return bool((spec or {}).get("roles"))
