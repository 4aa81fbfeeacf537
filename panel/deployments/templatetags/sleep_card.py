"""`{% sleep_box deployment user %}`: the deployment page's Sleep card, rendered where the page puts it (the
same template its live refresh fetches, panel/deployments/pages/sleep_views.py)."""

from django import template

from panel.deployments.pages.sleep_views import sleep_card

register = template.Library()


@register.inclusion_tag("deployments/sleep_box.html")
def sleep_box(deployment, user=None) -> dict:
    return sleep_card(deployment, user)
