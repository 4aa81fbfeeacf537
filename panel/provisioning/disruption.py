"""Installs that restart the NPU driver or the host stop every engine on the node: which steps do, and the
refusal that names the deployments they would stop until the admin drains the node
(panel.deployments.rollouts.node_actions.drain)."""

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from panel.nodes.lifecycle import deployments_to_drain
from panel.provisioning.profiles import CPU
from workers.ascend.compat import profile_for
from workers.steps.plan import RESTARTING_STEPS, InstallOptions, restarting_steps


def _from_plan(plan: list[dict], start: str | None = None) -> list[str]:
    names = [step.get("name") for step in plan or []]
    if start in names:
        names = names[names.index(start) :]
    return [name for name in names if name in RESTARTING_STEPS]


def planned_restarts(node, request: dict) -> list[str]:
    """The install's steps that restart the driver or the host, as far as the panel can tell: from the
    node's known driver and firmware versions, and from the last preflight's plan for the same profile."""
    start = request.get("resume_from")
    if start:
        plan = request.get("plan") or []
        if plan:
            return _from_plan(plan, start)
        return [start] if start in RESTARTING_STEPS else []  # no plan kept: the step itself is all we know
    key = request["profile"]
    profile = profile_for(key) if key != CPU else None
    if profile is None:
        return []
    host = {
        "driver": node.versions.get("driver"),
        "firmware": node.versions.get("firmware"),
        "chip": (node.facts or {}).get("chip"),
    }
    options = InstallOptions(
        driver_version=request.get("driver_version"), firmware_version=request.get("firmware_version")
    )
    steps = restarting_steps(host, profile, options)
    stack = getattr(node, "stack", None)
    if stack is not None and stack.preflight_profile == key:
        steps += [name for name in _from_plan(stack.preflight_plan) if name not in steps]
    return [name for name in RESTARTING_STEPS if name in steps]


def refuse_if_serving(node, request: dict) -> None:
    """Refuse an install that would restart the driver or the host under running deployments."""
    steps = planned_restarts(node, request)
    serving = deployments_to_drain(node) if steps else []
    if not serving:
        return
    raise ValidationError(
        {
            "node": [
                _(
                    "This install restarts the NPU driver or the host of %(node)s (steps: %(steps)s), "
                    "which would stop these deployments: %(names)s. Drain the node first (it is cordoned "
                    "and they are stopped), then install."
                )
                % {
                    "node": node.name,
                    "steps": ", ".join(steps),
                    "names": ", ".join(f"{d.name} ({d.get_observed_state_display()})" for d in serving),
                }
            ]
        },
        code="serving",
    )
