from panel.accounts.roles import OPERATOR, has_role, role_of

NAVIGATION = (
    ("dashboard", "core:dashboard"),
    ("nodes", "nodes:list"),
    ("models", "catalog:list"),
    ("deployments", "deployments:list"),
    ("operations", "operations:list"),
    ("settings", "accounts:settings"),
)


def panel(request):
    user = getattr(request, "user", None)
    return {
        "panel_role": role_of(user) if user is not None else None,
        "can_operate": has_role(user, OPERATOR) if user is not None else False,
    }
