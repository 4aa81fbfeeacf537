"""The Edit page's autoscaling fields: they only turn what the browser sent into the spec's `autoscale:`;
its rules (min ≤ max, one target, the bounds) are the spec's own (panel/deployments/autoscale/spec_field.py)
and its errors come back onto these fields through AUTOSCALE_SPEC_TO_FORM."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from panel.deployments.autoscale.config import DEFAULT_DOWN_AFTER_S, DEFAULT_UP_AFTER_S
from panel.deployments.models import Deployment

TARGET_CHOICES = [
    ("waiting_per_replica", _("Requests waiting per replica")),
    ("ttft_p90_ms", _("Time to first token, p90 (ms)")),
    ("kv_usage", _("KV cache usage (0–1)")),
]
# The spec's error keys (as edit_views flattens them) → these fields.
AUTOSCALE_SPEC_TO_FORM = {
    "autoscale": "autoscale",
    "autoscale.min": "autoscale_min",
    "autoscale.max": "autoscale_max",
    "autoscale.up_after_s": "autoscale_up_after_s",
    "autoscale.down_after_s": "autoscale_down_after_s",
    "autoscale.target": "autoscale_value",
    "autoscale.target.non_field_errors": "autoscale_value",
    **{f"autoscale.target.{name}": "autoscale_value" for name, _label in TARGET_CHOICES},
    "autoscale.non_field_errors": "autoscale",
}


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
        if data.get("autoscale"):
            for name in ("autoscale_min", "autoscale_max", "autoscale_value"):
                if data.get(name) is None and name not in self.errors:
                    self.add_error(name, _("Give a value to scale with the load."))
        return data


def autoscale_initial(deployment: Deployment) -> dict[str, Any]:
    """The fields filled from the deployment's `autoscale:` (or its count, for a first setting)."""
    scale = deployment.autoscale
    if not scale:
        count = deployment.replicas_wanted
        return {"autoscale": False, "autoscale_min": count, "autoscale_max": max(count, 2)}
    ((target, value),) = scale["target"].items()
    return {
        "autoscale": True,
        "autoscale_min": scale["min"],
        "autoscale_max": scale["max"],
        "autoscale_target": target,
        "autoscale_value": value,
        "autoscale_up_after_s": scale["up_after_s"],
        "autoscale_down_after_s": scale["down_after_s"],
    }


def autoscale_from_form(data: dict[str, Any]) -> dict[str, Any] | None:
    """The spec's `autoscale:` from the cleaned fields; None when unticked."""
    if not data.get("autoscale"):
        return None
    scale: dict[str, Any] = {
        "min": data["autoscale_min"],
        "max": data["autoscale_max"],
        "target": {data.get("autoscale_target") or TARGET_CHOICES[0][0]: data["autoscale_value"]},
    }
    for name in ("up_after_s", "down_after_s"):
        if data.get(f"autoscale_{name}") is not None:
            scale[name] = data[f"autoscale_{name}"]
    return scale
