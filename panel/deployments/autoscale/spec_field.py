"""The spec's `autoscale:` block, checked at the edge (panel/deployments/autoscale/config.py says what it
means), and what it does to `replicas` while it is set: the count is the autoscaler's, within [min, max].
The same block under a role of a disaggregated deployment (`roles.decode.autoscale`) owns that role's count,
on the targets that fit the role (config.ROLE_TARGETS)."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from rest_framework import serializers

from panel.deployments.autoscale.config import (
    DEFAULT_DOWN_AFTER_S,
    DEFAULT_UP_AFTER_S,
    MAX_REPLICAS,
    PREFILL,
    ROLE_TARGETS,
    TARGET_BOUNDS,
    WINDOW_BOUNDS_S,
)

FIELD = "autoscale"
OWNED = "replicas (autoscaler)"  # a diff's field when the count is the autoscaler's
# The diff's lines of an `autoscale:` block: they change who owns a count, nothing that runs.
LINES = (FIELD, OWNED)


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
        raise serializers.ValidationError({"replicas": [_outside_range(attrs["replicas"], scale)]})
    if not given:
        attrs["replicas"] = floor_of(scale)
    return attrs


def owned_role_replicas(role: str, entry: dict[str, Any], given: bool, most: int) -> None:
    """A role's `autoscale:` (roles_spec.py calls it for each role): a target that fits the role, min at
    least 1 (every request needs a prefill and a decode), max at most `most` engines, and the role's
    `replicas` within [min, max] when given, else min. Errors name `roles.<role>.…`."""
    scale = entry.get(FIELD)
    if not scale:
        return
    ((target, _value),) = scale["target"].items()
    if target not in ROLE_TARGETS[role]:
        _refuse_role(role, FIELD, "target", text=_role_target_refused(role, target))
    if scale["min"] < 1:
        text = _(
            "A role keeps at least one engine: every request needs a prefill and a decode, so min is 1 or "
            "more (scale-to-zero is for plain replicas)."
        )
        _refuse_role(role, FIELD, "min", text=text)
    if scale["max"] > most:
        _refuse_role(role, FIELD, "max", text=_("A role runs at most {n} engines.").format(n=most))
    if given and not scale["min"] <= entry["replicas"] <= scale["max"]:
        _refuse_role(role, "replicas", text=_outside_range(entry["replicas"], scale))
    if not given:
        entry["replicas"] = floor_of(scale)


def _outside_range(replicas: int, scale: dict[str, Any]) -> str:
    return _(
        "replicas {n} is outside autoscale's range {min}..{max}: while autoscale is set the autoscaler owns "
        "the count. Leave replicas out, give one within the range, or change min and max."
    ).format(n=replicas, min=scale["min"], max=scale["max"])


def _role_target_refused(role: str, target: str) -> str:
    """Why `role` does not scale on `target` (config.py's docstring has the sources)."""
    if role == PREFILL:
        return _(
            "prefill scales on ttft_p90_ms or waiting_per_replica, not {target}: a prefill engine keeps a "
            "request's KV cache only until decode has pulled it, so its KV usage measures the hand-over, "
            "not its load."
        ).format(target=target)
    return _(
        "decode scales on waiting_per_replica or kv_usage, not {target}: the time to first token is mostly "
        "the prefill and the KV hand-over, which more decode engines do not shorten."
    ).format(target=target)


def _refuse_role(role: str, *path: str, text: str):
    """A 400 on `roles.<role>.<path>`."""
    error: Any = [text]
    for key in reversed(("roles", role, *path)):
        error = {key: error}
    raise serializers.ValidationError(error)


def floor_of(scale: dict[str, Any]) -> int:
    """The fewest engine rows: min, and at least one (min 0 is that one asleep)."""
    return max(1, scale["min"])


def count_for(scale: dict[str, Any] | None, asked: int, now: int) -> int:
    """The replicas (of a role) an apply wants: `asked`, or with autoscale the count there is `now`, moved
    into the range (the autoscaler owns it; a new range moves it at once)."""
    if not scale or now <= 0:
        return asked
    return max(floor_of(scale), min(scale["max"], now))


def keep_owned_counts(spec: dict[str, Any], replicas_now: int, roles_now: dict[str, int]) -> None:
    """A person's apply leaves every count the autoscaler owns as it is (moved into its range): the plain
    `replicas`, or each autoscaled role's."""
    if not spec.get("roles"):
        spec["replicas"] = count_for(spec.get(FIELD), spec["replicas"], replicas_now)
        return
    for role, entry in spec["roles"].items():
        entry["replicas"] = count_for(entry.get(FIELD), entry["replicas"], int(roles_now.get(role) or 0))


def changes(
    before: dict[str, Any] | None, after: dict[str, Any] | None, asked: int, now: int, role: str = ""
) -> list[dict]:
    """The diff's lines for an `autoscale:` block (of `role`, named on each line) and, once it is set, who
    owns the count."""
    found: list[dict[str, Any]] = []
    where = {"role": role} if role else {}
    if (before or None) != (after or None):
        found.append({"field": FIELD, **where, "from": before or None, "to": after or None})
    if after and not before:
        found.append(
            {
                "field": OWNED,
                **where,
                "from": now,
                "to": _("{n}, then the autoscaler's within {min}..{max}").format(
                    n=asked, min=after["min"], max=after["max"]
                ),
            }
        )
    return found
