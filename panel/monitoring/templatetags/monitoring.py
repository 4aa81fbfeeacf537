from django import template

from panel.monitoring.models import Alert

register = template.Library()


@register.inclusion_tag("monitoring/alert_banner_body.html", takes_context=True)
def alert_banner(context):
    """The topbar count of open, unacknowledged alerts (kept live by static/js/alerts.js)."""
    user = context.get("user")
    count = Alert.objects.visible_to(user).needing_attention().count() if user is not None else 0
    return {"count": count, "user": user}


@register.inclusion_tag("monitoring/node_alerts_body.html", takes_context=True)
def node_alerts(context, node):
    """Open alerts of one node, for the node page."""
    user = context.get("user")
    open_alerts = Alert.objects.visible_to(user).open().filter(node=node).select_related("acknowledged_by")
    return {
        "alerts": list(open_alerts),
        "node": node,
        "user": user,
        "request": context.get("request"),
        "csrf_token": context.get("csrf_token"),
        "panel_role": context.get("panel_role"),
    }


@register.inclusion_tag("monitoring/deployment_alerts_body.html", takes_context=True)
def deployment_alerts(context, deployment):
    """Open alerts of one deployment (by name: monitoring sits below deployments), for its page."""
    user = context.get("user")
    open_alerts = (
        Alert.objects.visible_to(user)
        .open()
        .filter(node__isnull=True, deployment=deployment.name)
        .select_related("acknowledged_by")
    )
    return {
        "alerts": list(open_alerts),
        "deployment": deployment,
        "user": user,
        "request": context.get("request"),
        "csrf_token": context.get("csrf_token"),
        "panel_role": context.get("panel_role"),
    }


@register.inclusion_tag("monitoring/serving_alerts_body.html", takes_context=True)
def serving_alerts(context, limit: int = 10):
    """The dashboard's card of open deployment alerts (what serves), newest first."""
    user = context.get("user")
    open_alerts = (
        Alert.objects.visible_to(user).open().filter(node__isnull=True).select_related("acknowledged_by")
    )
    return {
        "alerts": list(open_alerts[:limit]),
        "user": user,
        "request": context.get("request"),
        "csrf_token": context.get("csrf_token"),
        "panel_role": context.get("panel_role"),
    }
