"""Use-cases of provisioning: preflight, install, resume and cancel as operations; what they leave on the
node (checklist, plan, installed stack); `installed_stack(node)` for the deploy launch step."""

import secrets

from django.core import signing
from django.core.exceptions import ValidationError
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from panel.audit import actions as audit
from panel.audit.services import record
from panel.core.domain.choices import OperationKind, OperationStatus
from panel.nodes.agents.trust import send_agent_task
from panel.operations.models import Operation
from panel.operations.ordering import last_with, stopped_at
from panel.operations.services import create_operation
from panel.provisioning import conf
from panel.provisioning.disruption import refuse_if_serving
from panel.provisioning.fit import misfit
from panel.provisioning.gate import check_preflight_gate, failed_rows
from panel.provisioning.models import NodeStack, PackageFile, PackageKind, StackStatus
from panel.provisioning.profiles import CPU, is_known
from workers.ascend.compat import profile_for
from workers.ascend.vercmp import Version, VersionError
from workers.task_names import AGENT_CANCEL_OPERATION, AGENT_INSTALL, AGENT_PREFLIGHT

DOWNLOAD_SALT = "panel.provisioning.download"
DOWNLOAD_TOKEN_MAX_AGE_S = 2 * 24 * 3600
PIP_WHEELHOUSE, PIP_INDEX, PIP_AUTO = "wheelhouse", "index", "auto"
PIP_SOURCES = (PIP_AUTO, PIP_WHEELHOUSE, PIP_INDEX)
OPEN_STATUSES = (OperationStatus.PENDING, OperationStatus.RUNNING)


def stack_of(node) -> NodeStack:
    return NodeStack.objects.get_or_create(node=node)[0]


def checked_profile(stack: NodeStack) -> str:
    """The profile key of the node's last preflight when it is newer than its last install, else ""."""
    preflight, install = stack.preflight_operation, stack.install_operation
    if preflight is None or (install is not None and install.created > preflight.created):
        return ""
    return (preflight.params or {}).get("profile", "")


def installed_profile(stack: NodeStack) -> str:
    """The profile key the node's last install was asked for, or ""."""
    install = stack.install_operation
    return (install.params or {}).get("profile", "") if install is not None else ""


def installed_stack(node) -> dict:
    """What the deploy launch step needs of the node's installed stack, or {} when none is installed:
    {"profile", "venv", "python", "set_env": [scripts to source], "cann", "vllm", "vllm_ascend",
    "versions": Node.versions, "installed_at"}."""
    stack = NodeStack.objects.filter(node=node, status=StackStatus.INSTALLED).first()
    if stack is None or not stack.record.get("venv"):
        return {}
    return {
        **stack.record,
        "set_env": list(stack.record.get("set_env") or []),
        "versions": dict(node.versions),
        "installed_at": stack.installed_at.isoformat() if stack.installed_at else None,
    }


# --- downloads ----------------------------------------------------------------------------------------


def download_token(grant: str) -> str:
    return signing.TimestampSigner(salt=DOWNLOAD_SALT).sign(grant)


def operation_for_token(token: str) -> Operation | None:
    """The open operation a download token was issued to, or None (bad, expired or finished)."""
    try:
        grant = signing.TimestampSigner(salt=DOWNLOAD_SALT).unsign(token, max_age=DOWNLOAD_TOKEN_MAX_AGE_S)
    except signing.BadSignature:
        return None
    return Operation.objects.filter(params__download_grant=grant, status__in=OPEN_STATUSES).first()


def package_offer(panel_url: str) -> list[dict]:
    """Every stored file in use with its checksum and the address the agent fetches it from (an upload
    that waits for an admin's approval is offered to no node)."""
    return [
        {
            "name": p.name,
            "kind": p.kind,
            "version": p.version,
            "sha256": p.sha256,
            "size": p.size,
            "url": panel_url.rstrip("/") + reverse("provisioning:download", args=[p.sha256, p.name]),
        }
        for p in PackageFile.objects.installable()
    ]


# --- requests -----------------------------------------------------------------------------------------


def _newest(kind: str, accepts=None) -> str | None:
    versions = []
    for version in PackageFile.objects.installable().filter(kind=kind).values_list("version", flat=True):
        try:
            if accepts is None or accepts(version):
                versions.append((Version(version), version))
        except VersionError:
            continue
    return max(versions)[1] if versions else None


def pick_driver_and_firmware(profile_key: str) -> tuple[str | None, str | None]:
    """The newest stored driver the profile's CANN documents (any when it documents none), newest firmware."""
    profile = profile_for(profile_key) if profile_key != CPU else None
    if profile is None:
        return None, None
    rule = profile.driver
    return _newest(PackageKind.DRIVER, rule.allows if rule else None), _newest(PackageKind.FIRMWARE)


def pip_choice(source: str) -> dict:
    if source == PIP_AUTO:
        source = (
            PIP_WHEELHOUSE
            if PackageFile.objects.installable().filter(kind=PackageKind.WHEEL).exists()
            else PIP_INDEX
        )
    if source == PIP_WHEELHOUSE:
        return {"wheelhouse": True}
    return {"index_url": conf.pip_index_url() or None, "extra_index_urls": conf.pip_extra_index_urls()}


def _validate(node, profile_key: str, pip_source: str) -> None:
    errors = {}
    if not is_known(profile_key):
        errors["profile"] = [
            _("Unknown profile %(p)s; pick a row of the Stack profiles page.") % {"p": profile_key}
        ]
    elif why := misfit(node, profile_key):
        errors["profile"] = [why]
    if pip_source not in PIP_SOURCES:
        errors["pip_source"] = [_("Choose one of: %(c)s.") % {"c": ", ".join(PIP_SOURCES)}]
    if errors:
        raise ValidationError(errors)


def _request(profile_key: str, pip_source: str, allow_reboot: bool) -> dict:
    driver, firmware = pick_driver_and_firmware(profile_key)
    return {
        "profile": profile_key,
        "driver_version": driver,
        "firmware_version": firmware,
        "pip": pip_choice(pip_source),
        "allow_reboot": bool(allow_reboot),
    }


def _start(node, kind: str, task_name: str, request: dict, panel_url: str, user, params: dict) -> Operation:
    """Create the operation with a fresh download grant; the task gets the store's offer and a token."""
    panel_url = conf.public_url() or panel_url
    grant = secrets.token_urlsafe(18)
    task_request = {**request, "packages": package_offer(panel_url), "download_token": download_token(grant)}
    return create_operation(
        kind=kind,
        node=node,
        task_name=task_name,
        user=user,
        target=node.name,
        params={**params, "profile": request["profile"], "download_grant": grant},
        task_kwargs={"request": task_request},
    )


def start_preflight(node, profile_key: str, *, user=None, panel_url: str, pip_source: str = PIP_AUTO):
    """Check the node against a profile without changing it; the checklist lands on the node's stack."""
    _validate(node, profile_key, pip_source)
    request = _request(profile_key, pip_source, allow_reboot=False)
    with transaction.atomic():
        operation = _start(node, OperationKind.PREFLIGHT, AGENT_PREFLIGHT, request, panel_url, user, {})
        stack = stack_of(node)
        stack.preflight_operation = operation
        stack.save(update_fields=["preflight_operation", "updated"])
    return operation


def _refuse_if_busy(node) -> None:
    busy = Operation.objects.filter(node=node, kind=OperationKind.INSTALL, status__in=OPEN_STATUSES).first()
    if busy is not None:
        raise ValidationError(
            {
                "node": [
                    _(
                        "An install is already running on %(node)s (operation %(op)s); "
                        "wait for it or cancel it."
                    )
                    % {"node": node.name, "op": busy.pk}
                ]
            }
        )


def start_install(
    node,
    profile_key: str,
    *,
    user=None,
    panel_url: str,
    pip_source: str = PIP_AUTO,
    allow_reboot: bool = False,
    overrides: dict[str, str] | None = None,
):
    """Install the profile's stack on the node: packages, venv, pip, checks; the result is its stack.

    Refused while the node's preflight of this profile has a failed row, unless an admin overrides each
    with a reason (`overrides`: check -> reason; panel.provisioning.gate), which the audit log keeps."""
    _validate(node, profile_key, pip_source)
    request = _request(profile_key, pip_source, allow_reboot)
    with transaction.atomic():
        _refuse_if_busy(node)
        stack = NodeStack.objects.select_for_update().filter(pk=stack_of(node).pk).get()
        overrides = check_preflight_gate(stack, profile_key, overrides, user)
        refuse_if_serving(node, request)
        request["preflight_overrides"] = overrides
        params = {"preflight_overrides": overrides} if overrides else {}
        operation = _start(node, OperationKind.INSTALL, AGENT_INSTALL, request, panel_url, user, params)
        stack.status, stack.profile, stack.install_operation = StackStatus.INSTALLING, profile_key, operation
        # The panel's address is kept so a resume after a reboot (no request to take it from) can use it.
        stack.install_request, stack.plan, stack.failed_step = {**request, "panel_url": panel_url}, [], ""
        stack.save()
        _audit_install(audit.INSTALL_STARTED, user, node, operation, profile_key)
        if overrides:
            failed = {entry["check"]: entry.get("detail", "") for entry in failed_rows(stack)}
            record(
                user,
                audit.PREFLIGHT_OVERRIDDEN,
                node.name,
                operation=operation.pk,
                profile=profile_key,
                overrides=overrides,
                failed={check: failed.get(check, "") for check in overrides},
            )
    return operation


def _audit_install(action: str, user, node, operation: Operation, profile_key: str, **details) -> None:
    """Which packages (by sha256) the install was offered: what ran as root on the node, on the record."""
    offered = dict(
        PackageFile.objects.installable().values_list("name", "sha256")
    )  # as package_offer handed them
    record(user, action, node.name, operation=operation.pk, profile=profile_key, packages=offered, **details)


def resume_install(
    node, *, user=None, panel_url: str, from_step: str | None = None, after_reboot: bool = False
):
    """A new install operation that reuses the last plan and starts at the step that failed or stopped.

    Refused while deployments serve on the node if the steps left restart its driver or the host, unless
    the host has just rebooted for this install (after_reboot)."""
    stack = NodeStack.objects.filter(node=node).first()
    if stack is None or not stack.install_request:
        raise ValidationError({"node": [_("Nothing to resume: no install has run on this node.")]})
    step = from_step or stack.failed_step
    if (
        stack.status not in (StackStatus.FAILED, StackStatus.CANCELLED, StackStatus.WAITING_REBOOT)
        or not step
    ):
        raise ValidationError({"node": [_("Nothing to resume: the last install did not stop at a step.")]})
    request = {**stack.install_request, "plan": stack.plan or None, "resume_from": step}
    with transaction.atomic():
        _refuse_if_busy(node)
        if not after_reboot:
            refuse_if_serving(node, request)
        operation = _start(
            node, OperationKind.INSTALL, AGENT_INSTALL, request, panel_url, user, {"resume_from": step}
        )
        stack.status, stack.install_operation = StackStatus.INSTALLING, operation
        stack.save(update_fields=["status", "install_operation", "updated"])
        _audit_install(audit.INSTALL_RESUMED, user, node, operation, stack.profile, step=step)
    return operation


def resume_after_reboot(node) -> Operation | None:
    """The node's agent is back: an install that stopped for a reboot carries on by itself."""
    stack = NodeStack.objects.filter(node=node, status=StackStatus.WAITING_REBOOT).first()
    panel_url = (stack.install_request or {}).get("panel_url", "") if stack else ""
    if stack is None or not (conf.public_url() or panel_url):
        return None
    user = stack.install_operation.created_by if stack.install_operation else None
    return resume_install(node, user=user, panel_url=panel_url, after_reboot=True)


def cancel(operation: Operation) -> None:
    """Ask the agent to stop before its next step (it ends the operation as cancelled)."""
    if operation.is_terminal:
        raise ValidationError({"operation": [_("The operation has already finished.")]})
    if operation.kind != OperationKind.INSTALL:
        raise ValidationError({"operation": [_("Only installs can be cancelled between steps.")]})
    send_agent_task(operation.node, AGENT_CANCEL_OPERATION, {"operation_id": str(operation.pk)})


# --- results (panel.operations.signals.operation_ended, inside the ingest transaction) ---------------


def _events(operation) -> list[dict]:
    """The operation's log events as the agent numbered them (panel.operations.ordering decides by that)."""
    return list(operation.events.filter(kind="log").values("attempt", "agent_seq", "kind", "payload"))


def record_late_events(operation: Operation) -> None:
    """Events of an ended install that arrive after its end (a batch held back on the agent) may hold the
    step it stopped at or its plan: what the install left is worked out again, once it was recorded."""
    stack = NodeStack.objects.filter(node=operation.node, install_operation=operation).first()
    if stack is not None and stack.status != StackStatus.INSTALLING:
        record_outcome(operation)


def record_outcome(operation: Operation) -> None:
    if operation.node_id is None:
        return
    stack = stack_of(operation.node)
    if operation.kind == OperationKind.PREFLIGHT:
        if operation.status == OperationStatus.SUCCEEDED:
            result = operation.result
            stack.preflight, stack.preflight_worst = result.get("checklist", []), result.get("worst", "")
            stack.preflight_plan, stack.preflight_profile = result.get("plan", []), result.get("profile", "")
            stack.preflight_at = operation.finished
            stack.save()
        return
    events = _events(operation)
    plan = last_with(events, "specs")
    if plan is not None:
        stack.plan = plan["specs"]
    if operation.status == OperationStatus.SUCCEEDED:
        node = operation.host
        node.versions = {**node.versions, **(operation.result.get("versions") or {})}
        node.save(update_fields=["versions", "updated"])
        stack.status, stack.record, stack.failed_step = (
            StackStatus.INSTALLED,
            operation.result.get("stack") or {},
            "",
        )
        stack.installed_at = operation.finished or timezone.now()
    else:
        stack.failed_step = stopped_at(events)
        if operation.status == OperationStatus.CANCELLED:
            stack.status = StackStatus.CANCELLED
        elif stack.failed_step == "reboot":
            stack.status = StackStatus.WAITING_REBOOT
        else:
            stack.status = StackStatus.FAILED
    stack.save()
