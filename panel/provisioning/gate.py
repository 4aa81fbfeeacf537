"""An install never runs over a failed preflight: the node's last preflight of the same profile (newer than
its last install) must have no failed row, or an admin overrides each failed row with a reason, which the
audit log keeps. A preflight operation that succeeded means the checks ran, not that the node passed them.

The agent checks again with fresh facts before its first step (workers.tasks.install), taking the same
overrides, so a node that changed since its preflight, or an install started without one, is held too."""

from django.core.exceptions import PermissionDenied, ValidationError
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from panel.accounts.roles import ADMIN, has_role
from panel.core.domain.choices import OperationStatus
from panel.operations.texts import checklist_text
from panel.provisioning.models import NodeStack
from workers.steps.preflight import FAIL

MAX_REASON = 500


def relevant_preflight(stack: NodeStack, profile_key: str):
    """The node's last preflight when it checked `profile_key` after the node's last install, else None."""
    preflight, install = stack.preflight_operation, stack.install_operation
    if preflight is None or (preflight.params or {}).get("profile") != profile_key:
        return None
    if install is not None and install.created > preflight.created:
        return None
    return preflight


def failed_rows(stack: NodeStack) -> list[dict]:
    return [entry for entry in stack.preflight or [] if entry.get("status") == FAIL]


def _clean(overrides: dict | None, user) -> dict[str, str]:
    overrides = {str(check): str(reason or "").strip() for check, reason in (overrides or {}).items()}
    if not overrides:
        return {}
    if user is None or not has_role(user, ADMIN):
        raise PermissionDenied(_("Only an admin may override a failed preflight check."))
    blank = sorted(check for check, reason in overrides.items() if not reason)
    if blank:
        raise ValidationError(
            {"overrides": [_("Give a reason to override %(checks)s.") % {"checks": ", ".join(blank)}]}
        )
    long = sorted(check for check, reason in overrides.items() if len(reason) > MAX_REASON)
    if long:
        raise ValidationError(
            {
                "overrides": [
                    _("Keep the reason for %(checks)s under %(n)d characters.")
                    % {"checks": ", ".join(long), "n": MAX_REASON}
                ]
            }
        )
    return overrides


def check_preflight_gate(stack: NodeStack, profile_key: str, overrides: dict | None, user) -> dict[str, str]:
    """Raise unless the install of `profile_key` may run; returns the overrides it runs with (check ->
    reason), which the agent's own check takes as well."""
    overrides = _clean(overrides, user)
    preflight = relevant_preflight(stack, profile_key)
    if preflight is None:
        return overrides
    if not preflight.is_terminal:
        raise ValidationError(
            {"preflight": [_("The preflight of %(profile)s is still running; wait for its checklist.") % {
                "profile": profile_key}]}
        )  # fmt: skip
    if preflight.status != OperationStatus.SUCCEEDED:
        raise ValidationError(
            {
                "preflight": [
                    _("The preflight of %(profile)s did not finish (%(status)s): run it again.")
                    % {"profile": profile_key, "status": preflight.get_status_display()}
                ]
            }
        )
    failed = failed_rows(stack)
    unknown = sorted(set(overrides) - {entry["check"] for entry in failed})
    if unknown:
        raise ValidationError(
            {
                "overrides": [
                    _("Nothing to override: %(checks)s did not fail in the preflight of %(profile)s.")
                    % {"checks": ", ".join(unknown), "profile": profile_key}
                ]
            }
        )
    blocking = [entry for entry in failed if entry["check"] not in overrides]
    if blocking:
        raise ValidationError({"preflight": blocked_messages(blocking, profile_key)})
    return overrides


def blocked_messages(blocking: list[dict], profile_key: str) -> list[str]:
    """What the page and the API say: how many rows failed, then each row with its fix."""
    count = len(blocking)
    head = ngettext(
        "%(count)d preflight check failed for %(profile)s: the install is blocked. Fix it and run the "
        "preflight again, or (admins) override it with a reason.",
        "%(count)d preflight checks failed for %(profile)s: the install is blocked. Fix them and run the "
        "preflight again, or (admins) override each with a reason.",
        count,
    ) % {"count": count, "profile": profile_key}
    rows = [
        _("%(check)s: %(detail)s. Fix: %(fix)s")
        % {
            "check": entry["check"],
            "detail": checklist_text(entry, "detail"),
            "fix": checklist_text(entry, "fix") or "-",
        }
        for entry in blocking
    ]
    return [head, *rows]
