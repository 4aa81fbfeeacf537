from django.utils.translation import gettext_lazy as _

from panel.accounts.roles import ADMIN, OPERATOR, VIEWER, has_role, role_of

ROLE_LABELS = {ADMIN: _("Administrator"), OPERATOR: _("Operator"), VIEWER: _("Viewer")}


def panel(request):
    user = getattr(request, "user", None)
    role = role_of(user) if user is not None else None
    match = getattr(request, "resolver_match", None)
    return {
        # The app whose page this is ("nodes", "provisioning", …): the one navigation link base.html marks.
        # Namespaces, not URL prefixes: /provisioning/nodes/<name>/ contains "/nodes/" but is a Packages page.
        "nav_section": match.namespace if match else "",
        "panel_role": role,
        "panel_role_label": ROLE_LABELS.get(role, ""),
        "can_operate": has_role(user, OPERATOR) if user is not None else False,
    }
