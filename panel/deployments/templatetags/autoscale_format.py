"""A deployment's `autoscale:` target in words, in the viewer's language (templates/deployments/
autoscale_summary.html)."""

from django import template
from django.utils.translation import gettext as _

register = template.Library()


@register.filter
def autoscale_target(scale: dict | None) -> str:
    """The target in words: {"waiting_per_replica": 4} reads "waiting requests per replica under 4"."""
    if not scale or not scale.get("target"):
        return ""
    ((name, value),) = scale["target"].items()
    if name == "ttft_p90_ms":
        return _("time to first token p90 under {value} ms").format(value=value)
    if name == "kv_usage":
        return _("KV cache usage under {value}").format(value=value)
    return _("waiting requests per replica under {value}").format(value=value)
