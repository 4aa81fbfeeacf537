"""The Edit page's sleep fields: they only turn what the browser sent into the spec's `idle:`; its rules
(the bounds, the levels, which nodes can sleep) are the spec's and the planner's
(panel/deployments/spec/request.py, panel/deployments/launch/sleep_launch.py), whose errors come back onto
these fields through IDLE_SPEC_TO_FORM."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from panel.deployments.launch.sleep_launch import sleep_problems
from panel.deployments.models import Deployment
from panel.deployments.spec.spec import idle_of
from panel.nodes.models import Node

LEVEL_CHOICES = [
    (1, _("1: keep the weights in host memory (wakes in seconds)")),
    (2, _("2: drop the weights too (frees the most, wakes slower)")),
]
IDLE_SPEC_TO_FORM = {
    "idle": "idle",
    "idle.sleep_after_s": "idle_sleep_after_s",
    "idle.level": "idle_level",
    "idle.non_field_errors": "idle",
}


class IdleFields(forms.Form):
    idle = forms.BooleanField(
        label=_("Sleep when idle"),
        required=False,
        help_text=_(
            "An engine that served nothing for a while sleeps and gives back its NPU memory; the first "
            "request wakes it (vLLM's sleep mode). Turning this on or off restarts the engines."
        ),
    )
    idle_sleep_after_s = forms.IntegerField(
        label=_("Sleep after (s) without a request"), required=False, min_value=60, max_value=7 * 24 * 3600
    )
    idle_level = forms.TypedChoiceField(
        label=_("Sleep level"), choices=LEVEL_CHOICES, coerce=int, required=False, initial=1
    )

    def clean(self):
        data = super().clean()
        if (
            data.get("idle")
            and data.get("idle_sleep_after_s") is None
            and "idle_sleep_after_s" not in self.errors
        ):
            self.add_error("idle_sleep_after_s", _("Give the seconds without a request before it sleeps."))
        return data


def idle_initial(deployment: Deployment) -> dict[str, Any]:
    idle = idle_of(deployment)
    if not idle:
        return {"idle": False, "idle_sleep_after_s": 600, "idle_level": 1}
    return {"idle": True, "idle_sleep_after_s": idle["sleep_after_s"], "idle_level": idle["level"]}


def idle_from_form(data: dict[str, Any]) -> dict[str, Any] | None:
    if not data.get("idle"):
        return None
    return {"sleep_after_s": data["idle_sleep_after_s"], "level": data.get("idle_level") or 1}


def sleep_refusal_of(deployment: Deployment) -> list[str]:
    """Why the engines as they run now could not sleep (the planner's own reasons, from their launch)."""
    parts = []
    for part in (deployment.spec or {}).get("parts") or []:
        node = Node.objects.filter(name=part.get("node")).first()
        if node is not None:
            parts.append(SimpleNamespace(node=node, payload=part.get("launch") or {}))
    if not parts:
        return []
    chip = parts[0].payload.get("chip") or (deployment.spec or {}).get("chip") or ""
    return sleep_problems({"sleep_after_s": 600, "level": 1}, parts, chip)
