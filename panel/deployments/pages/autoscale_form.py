"""The Edit page's and the wizard's autoscaling fields: they only turn what the browser sent into the spec's
`autoscale:` (or, for a deployment with roles, each role's `roles.<role>.autoscale`); its rules (min ≤ max,
one target, the bounds, the targets a role may keep) are the spec's own (panel/deployments/autoscale/
spec_field.py) and its errors come back onto these fields through AUTOSCALE_SPEC_TO_FORM and
ROLE_AUTOSCALE_SPEC_TO_FORM."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _

from panel.core.domain.choices import DeploymentRole
from panel.deployments.autoscale.config import (
    DECODE,
    DEFAULT_DOWN_AFTER_S,
    DEFAULT_UP_AFTER_S,
    PREFILL,
    ROLE_TARGETS,
    blocks_of,
)
from panel.deployments.models import Deployment
from panel.deployments.spec.roles_spec import ROLES

TARGET_CHOICES = [
    ("waiting_per_replica", _("Requests waiting per replica")),
    ("ttft_p90_ms", _("Time to first token, p90 (ms)")),
    ("kv_usage", _("KV cache usage (0–1)")),
]
# Each field's name after its prefix (`autoscale`, or `<role>_autoscale`), in the order a role's row has them.
FIELD_SUFFIXES = ("", "_min", "_max", "_target", "_value", "_up_after_s", "_down_after_s")


def autoscale_field(role: str, suffix: str = "") -> str:
    """A field's name: `autoscale<suffix>` for plain replicas, `<role>_autoscale<suffix>` for a role's."""
    return f"{role}_autoscale{suffix}" if role else f"autoscale{suffix}"


def _spec_to_form(role: str) -> dict[str, str]:
    """The spec's error keys of one `autoscale:` block (as edit_views flattens them) → its fields."""
    block = f"roles.{role}.autoscale" if role else "autoscale"
    value = autoscale_field(role, "_value")
    return {
        block: autoscale_field(role),
        f"{block}.non_field_errors": autoscale_field(role),
        **{
            f"{block}.{name}": autoscale_field(role, f"_{name}")
            for name in ("min", "max", "up_after_s", "down_after_s")
        },
        f"{block}.target": value,
        **{f"{block}.target.{name}": value for name in (*dict(TARGET_CHOICES), "non_field_errors")},
    }


AUTOSCALE_SPEC_TO_FORM = _spec_to_form("")
ROLE_AUTOSCALE_SPEC_TO_FORM = {key: field for role in ROLES for key, field in _spec_to_form(role).items()}


def _require_values(form: forms.Form, data: dict[str, Any], role: str) -> None:
    """A ticked box (of plain replicas, or of `role`) needs its range and its target's value."""
    if not data.get(autoscale_field(role)):
        return
    for suffix in ("_min", "_max", "_value"):
        name = autoscale_field(role, suffix)
        if data.get(name) is None and name not in form.errors:
            form.add_error(name, _("Give a value to scale with the load."))


class AutoscaleFields(forms.Form):
    autoscale = forms.BooleanField(
        label=_("Scale replicas with the load"),
        required=False,
        help_text=_(
            "The panel adds a replica when the target figure stays above its value, and removes one when one "
            "fewer would do; the replica count is then the autoscaler's, within min and max."
        ),
    )
    # No bounds here: the spec's (min 0 with sleep is scale-to-zero) come back onto these fields.
    autoscale_min = forms.IntegerField(label=_("Fewest replicas"), required=False)
    autoscale_max = forms.IntegerField(label=_("Most replicas"), required=False)
    autoscale_target = forms.ChoiceField(label=_("Target figure"), choices=TARGET_CHOICES, required=False)
    autoscale_value = forms.FloatField(label=_("Target value"), required=False)
    autoscale_up_after_s = forms.IntegerField(
        label=_("Scale up after (s)"),
        required=False,
        initial=int(DEFAULT_UP_AFTER_S),
        help_text=_("How long the figure stays above the target before a replica is added."),
    )
    autoscale_down_after_s = forms.IntegerField(
        label=_("Scale down after (s)"),
        required=False,
        initial=int(DEFAULT_DOWN_AFTER_S),
        help_text=_("How long one replica fewer would do before one is removed."),
    )

    def clean(self):
        data = super().clean()
        _require_values(self, data, "")
        return data


# Per role of a disaggregated deployment: the same fields for each role, `<role>_autoscale…`, its targets
# only those that fit the role (panel/deployments/autoscale/config.py ROLE_TARGETS says why).
def _role_fields(role: str) -> tuple[forms.Field, ...]:
    """One role's autoscaling fields, in FIELD_SUFFIXES' order; each label names the role, so an error
    listed above the form says which."""
    name = DeploymentRole(role).label

    def label(text):
        return format_lazy("{role}: {field}", role=name, field=text)

    targets = [(target, text) for target, text in TARGET_CHOICES if target in ROLE_TARGETS[role]]
    return (
        forms.BooleanField(label=label(_("scale with the load")), required=False),
        forms.IntegerField(label=label(_("fewest engines")), required=False),
        forms.IntegerField(label=label(_("most engines")), required=False),
        forms.ChoiceField(label=label(_("target figure")), choices=targets, required=False),
        forms.FloatField(label=label(_("target value")), required=False),
        forms.IntegerField(label=label(_("up after (s)")), required=False, initial=int(DEFAULT_UP_AFTER_S)),
        forms.IntegerField(
            label=label(_("down after (s)")), required=False, initial=int(DEFAULT_DOWN_AFTER_S)
        ),
    )


class RoleAutoscaleFields(forms.Form):
    """Each role's own autoscaling: the role's engine count follows that role's engines' figures."""

    (
        prefill_autoscale,
        prefill_autoscale_min,
        prefill_autoscale_max,
        prefill_autoscale_target,
        prefill_autoscale_value,
        prefill_autoscale_up_after_s,
        prefill_autoscale_down_after_s,
    ) = _role_fields(PREFILL)
    (
        decode_autoscale,
        decode_autoscale_min,
        decode_autoscale_max,
        decode_autoscale_target,
        decode_autoscale_value,
        decode_autoscale_up_after_s,
        decode_autoscale_down_after_s,
    ) = _role_fields(DECODE)

    def clean(self):
        data = super().clean()
        for role in ROLES:
            _require_values(self, data, role)
        return data

    def role_rows(self) -> list[dict[str, Any]]:
        """The fields per role, for the template's table."""
        return [
            {
                "role": role,
                "label": DeploymentRole(role).label,
                "fields": [self[autoscale_field(role, suffix)] for suffix in FIELD_SUFFIXES],
            }
            for role in ROLES
        ]


def initial_of(role: str, scale: dict[str, Any] | None, count: int) -> dict[str, Any]:
    """One count's fields (plain replicas' for role "", or a role's) filled from its `autoscale:`; without
    one the box is off, the range starts at the engines there are (`count`), and a role's target is the
    first that fits it."""
    if not scale:
        initial: dict[str, Any] = {
            autoscale_field(role): False,
            autoscale_field(role, "_min"): count,
            autoscale_field(role, "_max"): max(count, 2),
        }
        if role:
            initial[autoscale_field(role, "_target")] = ROLE_TARGETS[role][0]
        return initial
    ((target, value),) = scale["target"].items()
    values = (True, scale["min"], scale["max"], target, value, scale.get("up_after_s"),
              scale.get("down_after_s"))  # fmt: skip
    return {autoscale_field(role, suffix): each for suffix, each in zip(FIELD_SUFFIXES, values, strict=True)}


def _roles_initial(blocks: dict[str, Any], counts: dict[str, Any]) -> dict[str, Any]:
    return {
        name: each
        for role in ROLES
        for name, each in initial_of(role, blocks.get(role), int(counts.get(role) or 1)).items()
    }


def autoscale_initial(deployment: Deployment) -> dict[str, Any]:
    """The Edit page's fields: the plain replicas' and each role's, filled from the deployment's blocks (or
    its counts, for a first setting)."""
    blocks = blocks_of(deployment)
    return {
        **initial_of("", blocks.get(""), deployment.replicas_wanted),
        **_roles_initial(blocks, deployment.roles_wanted or {}),
    }


def wizard_autoscale_initial(state: dict[str, Any]) -> dict[str, Any]:
    """The wizard's engine step's fields, from its state: the plain `autoscale:` and each role's."""
    roles = state.get("roles") or {}
    return {
        **initial_of("", state.get("autoscale"), state.get("replicas") or 1),
        **_roles_initial(
            {role: entry.get("autoscale") for role, entry in roles.items()},
            {role: entry.get("replicas") for role, entry in roles.items()},
        ),
    }


def autoscale_from_form(data: dict[str, Any], role: str = "") -> dict[str, Any] | None:
    """The spec's `autoscale:` of plain replicas (or `roles.<role>.autoscale`) from the cleaned fields; None
    when its box is unticked."""
    if not data.get(autoscale_field(role)):
        return None
    first = ROLE_TARGETS[role][0] if role else TARGET_CHOICES[0][0]
    target = data.get(autoscale_field(role, "_target")) or first
    scale: dict[str, Any] = {
        "min": data[autoscale_field(role, "_min")],
        "max": data[autoscale_field(role, "_max")],
        "target": {target: data[autoscale_field(role, "_value")]},
    }
    for name in ("up_after_s", "down_after_s"):
        value = data.get(autoscale_field(role, f"_{name}"))
        if value is not None:
            scale[name] = value
    return scale


def roles_with_autoscale(roles: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    """A spec's `roles:` (the wizard's) with each role's `autoscale:` as the cleaned fields say."""
    out = {}
    for role, entry in roles.items():
        entry = {key: value for key, value in entry.items() if key != "autoscale"}
        scale = autoscale_from_form(data, role)
        if scale is not None:
            entry["autoscale"] = scale
        out[role] = entry
    return out
