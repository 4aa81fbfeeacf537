"""Roles are Django groups: admin > operator > viewer. One function answers "what may this user do"."""

ADMIN = "admin"
OPERATOR = "operator"
VIEWER = "viewer"
ROLES = (ADMIN, OPERATOR, VIEWER)
RANK = {VIEWER: 1, OPERATOR: 2, ADMIN: 3}

# Model permissions each role's group receives (app_label.codename prefixes); admin gets all.
OPERATOR_WRITES = {
    "operations": ("add", "change"),
    "deployments": ("add", "change", "delete"),
    "catalog": ("add", "change", "delete"),
    "nodes": ("change",),
}


def role_of(user) -> str | None:
    if user is None or not user.is_authenticated or not user.is_active:
        return None
    if user.is_superuser:
        return ADMIN
    cached = getattr(user, "_panel_role", None)
    if cached is None:
        names = set(user.groups.values_list("name", flat=True))
        cached = next((role for role in ROLES if role in names), "")
        user._panel_role = cached
    return cached or None


def has_role(user, needed: str) -> bool:
    role = role_of(user)
    return role is not None and RANK[role] >= RANK[needed]
