"""What the audit log records: one named constant per action (other apps import these, never bare strings)."""

from django.utils.translation import gettext_lazy as _

from panel.core.domain.choices import COLOUR_ALARM, COLOUR_OK, COLOUR_RUNNING, COLOUR_WARNING, ColouredChoices

SIGNIN_SUCCEEDED = "signin.succeeded"
SIGNIN_FAILED = "signin.failed"
SIGNIN_LOCKED_OUT = "signin.locked_out"
SIGNIN_FAILURE_ALARM = "signin.failure_alarm"  # failed sign-ins per minute across the panel passed the alarm
TOKEN_CREATED = "token.created"  # noqa: S105 (an action name, not a secret)
TOKEN_REVOKED = "token.revoked"  # noqa: S105
ROLE_CHANGED = "user.role_changed"
NODE_ADDED = "node.added"
NODE_REMOVED = "node.removed"
NODE_JOIN_TOKEN_ISSUED = "node.join_token_issued"  # noqa: S105 (an action name, not a secret)
DEPLOYMENT_CREATED = "deployment.created"
DEPLOYMENT_DELETED = "deployment.deleted"
DEPLOYMENT_APPLIED = "deployment.applied"  # a spec changed an existing deployment
INSTALL_STARTED = "install.started"
INSTALL_RESUMED = "install.resumed"
# An admin ran an install over failed preflight checks, each with a reason.
PREFLIGHT_OVERRIDDEN = "install.preflight_overridden"
PACKAGE_ADDED = "package.added"
PACKAGE_REPLACEMENT_PENDING = "package.replacement_pending"
PACKAGE_REPLACEMENT_CONFIRMED = "package.replacement_confirmed"
PACKAGE_APPROVED = "package.approved"  # an operator's new package, approved by an admin
PACKAGE_REPLACEMENT_DISCARDED = "package.replacement_discarded"
PACKAGE_DELETED = "package.deleted"
# An admin ended an operation by hand (the force-fail feature records this).
OPERATION_FORCE_FAILED = "operation.force_failed"
# An NPU's health state changed: by the health policy (actor "policy") or an admin's override.
NPU_HEALTH_CHANGED = "npu.health_changed"


class AuditAction(ColouredChoices):
    SIGNIN_SUCCEEDED = SIGNIN_SUCCEEDED, _("Signed in")
    SIGNIN_FAILED = SIGNIN_FAILED, _("Sign-in failed")
    SIGNIN_LOCKED_OUT = SIGNIN_LOCKED_OUT, _("Sign-in locked out")
    SIGNIN_FAILURE_ALARM = SIGNIN_FAILURE_ALARM, _("Sign-in failure alarm")
    TOKEN_CREATED = TOKEN_CREATED, _("API token created")
    TOKEN_REVOKED = TOKEN_REVOKED, _("API token revoked")
    ROLE_CHANGED = ROLE_CHANGED, _("Role changed")
    NODE_ADDED = NODE_ADDED, _("Node added")
    NODE_REMOVED = NODE_REMOVED, _("Node removed")
    NODE_JOIN_TOKEN_ISSUED = NODE_JOIN_TOKEN_ISSUED, _("Join token issued")
    DEPLOYMENT_CREATED = DEPLOYMENT_CREATED, _("Deployment created")
    DEPLOYMENT_DELETED = DEPLOYMENT_DELETED, _("Deployment deleted")
    DEPLOYMENT_APPLIED = DEPLOYMENT_APPLIED, _("Deployment spec applied")
    INSTALL_STARTED = INSTALL_STARTED, _("Install started")
    INSTALL_RESUMED = INSTALL_RESUMED, _("Install resumed")
    PREFLIGHT_OVERRIDDEN = PREFLIGHT_OVERRIDDEN, _("Failed preflight checks overridden")
    PACKAGE_ADDED = PACKAGE_ADDED, _("Package added")
    PACKAGE_REPLACEMENT_PENDING = PACKAGE_REPLACEMENT_PENDING, _("Package replacement uploaded")
    PACKAGE_REPLACEMENT_CONFIRMED = PACKAGE_REPLACEMENT_CONFIRMED, _("Package replacement confirmed")
    PACKAGE_APPROVED = PACKAGE_APPROVED, _("Package approved")
    PACKAGE_REPLACEMENT_DISCARDED = PACKAGE_REPLACEMENT_DISCARDED, _("Package replacement discarded")
    PACKAGE_DELETED = PACKAGE_DELETED, _("Package deleted")
    OPERATION_FORCE_FAILED = OPERATION_FORCE_FAILED, _("Operation force-failed")
    NPU_HEALTH_CHANGED = NPU_HEALTH_CHANGED, _("NPU health state changed")


AuditAction.COLOURS = {
    SIGNIN_SUCCEEDED: COLOUR_OK,
    SIGNIN_FAILED: COLOUR_WARNING,
    SIGNIN_LOCKED_OUT: COLOUR_ALARM,
    SIGNIN_FAILURE_ALARM: COLOUR_ALARM,
    ROLE_CHANGED: COLOUR_WARNING,
    NODE_REMOVED: COLOUR_WARNING,
    DEPLOYMENT_DELETED: COLOUR_WARNING,
    PACKAGE_REPLACEMENT_PENDING: COLOUR_WARNING,
    PACKAGE_DELETED: COLOUR_WARNING,
    OPERATION_FORCE_FAILED: COLOUR_ALARM,
    NPU_HEALTH_CHANGED: COLOUR_WARNING,
    PREFLIGHT_OVERRIDDEN: COLOUR_WARNING,
}
DEFAULT_COLOUR = COLOUR_RUNNING
