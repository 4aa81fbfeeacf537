"""`{% decisions_timeline deployment %}`: the deployment page's Decisions card, rendered where the page puts
it (the same template its live refresh fetches, panel/deployments/pages/decision_views.py)."""

from django import template

from panel.deployments.pages.decision_views import timeline

register = template.Library()


@register.inclusion_tag("deployments/decisions_box.html")
def decisions_timeline(deployment) -> dict:
    return timeline(deployment)
