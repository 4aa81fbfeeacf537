"""The deployment page's Decisions card: the newest recorded decisions (docs/serving-plane.md §2) as a
timeline — kind, time, who, the reason in the page's language, the figures, the outcome. The page renders it
once; static/js/decisions_box.js fetches it again (this view) when a `deployment.decision` frame arrives."""

from django.shortcuts import render
from django.views.decorators.http import require_safe

from panel.accounts.roles import VIEWER
from panel.core.domain.choices import DecisionActor, DecisionOutcome
from panel.core.domain.translated import in_language
from panel.core.views import role_required
from panel.deployments.decision_models import Decision
from panel.deployments.models import Deployment
from panel.deployments.pages.views import visible_deployment

SHOWN = 20


def timeline(deployment: Deployment) -> dict:
    """The card's context: the primary's newest decisions, each ready to show in the active language."""
    primary = deployment.replica_of or deployment
    rows = list(Decision.objects.filter(deployment=primary).order_by("-time", "-id")[: SHOWN + 1])
    return {
        "timeline_primary": primary.name,
        "decisions": [_shown(decision) for decision in rows[:SHOWN]],
        "decisions_more": len(rows) > SHOWN,
    }


def _shown(decision: Decision) -> dict:
    return {
        "id": decision.pk,
        "time": decision.time,
        "kind": decision.kind,
        "kind_label": decision.get_kind_display(),
        "kind_colour": decision.kind_colour,
        "role": decision.role,
        "replica": decision.replica,
        "who": decision.username or DecisionActor(decision.actor).label,
        "reason": in_language(decision.reason_parts),
        "figures": [(name, _number(value)) for name, value in decision.figures.items()],
        "outcome": decision.outcome,
        "outcome_label": DecisionOutcome(decision.outcome).label,
        "outcome_colour": decision.outcome_colour,
        "outcome_reason": in_language(decision.outcome_parts),
    }


def _number(value) -> str:
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:.4g}"
    return str(value)


@role_required(VIEWER)
@require_safe
def deployment_decisions(request, name):
    deployment = visible_deployment(request, name)
    return render(request, "deployments/decisions_box.html", timeline(deployment))
