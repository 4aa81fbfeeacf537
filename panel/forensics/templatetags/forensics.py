from django import template

from panel.forensics.models import DiagnosticsBundle

register = template.Library()


@register.simple_tag
def diagnostics_bundles(deployment):
    """The deployment's diagnostics bundles, newest first (a handful are kept)."""
    return DiagnosticsBundle.objects.filter(deployment=deployment.name).order_by("-created")
