"""The spec's `autoscale:` block, checked at the edge (panel/deployments/autoscale/config.py says what it
means), and what it does to `replicas` while it is set: the count is the autoscaler's, within [min, max]."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from rest_framework import serializers

from panel.deployments.autoscale.config import (
    DEFAULT_DOWN_AFTER_S,
    DEFAULT_UP_AFTER_S,
    MAX_REPLICAS,
    TARGET_BOUNDS,
    WINDOW_BOUNDS_S,
)

FIELD = "autoscale"
OWNED = "replicas (autoscaler)"  # a diff's field when the count is the autoscaler's


def _target_field(name: str) -> serializers.FloatField:
    low, high = TARGET_BOUNDS[name]
    return serializers.FloatField(required=False, min_value=low, max_value=high)


class AutoscaleTargetSerializer(serializers.Serializer):
    """Exactly one figure the replicas are kept under."""

    ttft_p90_ms = _target_field("ttft_p90_ms")
    waiting_per_replica = _target_field("waiting_per_replica")
    kv_usage = _target_field("kv_usage")

    def validate(self, attrs):
        given = [name for name in TARGET_BOUNDS if attrs.get(name) is not None]
        if len(given) != 1:
            raise serializers.ValidationError(
                _("Give exactly one target: ttft_p90_ms, waiting_per_replica or kv_usage.")
            )
        return {given[0]: attrs[given[0]]}


class AutoscaleSerializer(serializers.Serializer):
    """`autoscale: {min, max, target: {…}, up_after_s, down_after_s}`."""

    min = serializers.IntegerField(
        min_value=0,
        max_value=MAX_REPLICAS,
        help_text="Fewest replicas; 0 (with idle:) keeps one engine asleep when quiet, woken by a request.",
    )
    max = serializers.IntegerField(min_value=1, max_value=MAX_REPLICAS, help_text="Most replicas.")
    target = AutoscaleTargetSerializer()
    up_after_s = serializers.IntegerField(
        required=False,
        default=int(DEFAULT_UP_AFTER_S),
        min_value=int(WINDOW_BOUNDS_S[0]),
        max_value=int(WINDOW_BOUNDS_S[1]),
        help_text="Seconds the figure stays above target before one replica is added.",
    )
    down_after_s = serializers.IntegerField(
        required=False,
        default=int(DEFAULT_DOWN_AFTER_S),
        min_value=int(WINDOW_BOUNDS_S[0]),
        max_value=int(WINDOW_BOUNDS_S[1]),
        help_text="Seconds one replica fewer would do before one is removed.",
    )

    def validate(self, attrs):
        if attrs["min"] > attrs["max"]:
            raise serializers.ValidationError(
                {"min": [_("min ({min}) is above max ({max}).").format(min=attrs["min"], max=attrs["max"])]}
            )
        return {
            "min": attrs["min"],
            "max": attrs["max"],
            "target": dict(attrs["target"]),
            "up_after_s": attrs["up_after_s"],
            "down_after_s": attrs["down_after_s"],
        }


def replicas_given(initial: Any) -> bool:
    return isinstance(initial, dict) and "replicas" in initial


def owned_replicas(attrs: dict[str, Any], given: bool) -> dict[str, Any]:
    """A spec with `autoscale:` whose `replicas` is outside [min, max] is refused; left out, it is min (at
    least one: the apply keeps the count the autoscaler reached, see `count_for`). With max above 1 the
    placement is a count: the replicas the autoscaler adds each take free NPUs of their own. `min: 0` needs
    `idle:`: zero is one engine asleep, woken by the first request (config.py)."""
    scale = attrs.get(FIELD)
    if not scale:
        return attrs
    if scale["min"] == 0 and not attrs.get("idle"):
        raise serializers.ValidationError(
            {
                FIELD: [
                    _(
                        "min 0 needs idle: at zero the last engine sleeps (it is not stopped), so the first "
                        "request wakes it in seconds instead of waiting for a cold start. Add idle: "
                        "{sleep_after_s, level}, or set min to 1."
                    )
                ]
            }
        )
    npus = (attrs.get("placement") or {}).get("npus")
    if scale["max"] > 1 and (attrs.get("nodes") or isinstance(npus, list)):
        raise serializers.ValidationError(
            {
                FIELD: [
                    _(
                        "The autoscaler adds replicas, each on free NPUs of its own: give placement.npus "
                        "as a count or auto, not NPU ids or nodes."
                    )
                ]
            }
        )
    if given and not scale["min"] <= attrs["replicas"] <= scale["max"]:
        raise serializers.ValidationError(
            {
                "replicas": [
                    _(
                        "replicas {n} is outside autoscale's range {min}..{max}: while autoscale is set the "
                        "autoscaler owns the count. Leave replicas out, give one within the range, or "
                        "change min and max."
                    ).format(n=attrs["replicas"], min=scale["min"], max=scale["max"])
                ]
            }
        )
    if not given:
        attrs["replicas"] = floor_of(scale)
    return attrs


def floor_of(scale: dict[str, Any]) -> int:
    """The fewest engine rows: min, and at least one (min 0 is that one asleep)."""
    return max(1, scale["min"])


def count_for(spec: dict[str, Any], now: int) -> int:
    """The replicas an apply wants: the spec's, or with autoscale the count there is now, moved into the
    range (the autoscaler owns it; a new range moves it at once)."""
    scale = spec.get(FIELD)
    if not scale or now <= 0:
        return spec["replicas"]
    return max(floor_of(scale), min(scale["max"], now))


def changes(current_autoscale: dict[str, Any] | None, spec: dict[str, Any], now: int) -> list[dict]:
    """The diff's lines for `autoscale:` and, while it is set, who owns the count."""
    found = []
    wanted = spec.get(FIELD) or None
    if (current_autoscale or None) != wanted:
        found.append({"field": FIELD, "from": current_autoscale or None, "to": wanted})
    if wanted and not current_autoscale:
        found.append(
            {
                "field": OWNED,
                "from": now,
                "to": _("{n}, then the autoscaler's within {min}..{max}").format(
                    n=spec["replicas"], min=wanted["min"], max=wanted["max"]
                ),
            }
        )
    return found
