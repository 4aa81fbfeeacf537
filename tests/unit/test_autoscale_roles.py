"""Autoscaling per role of a disaggregated deployment (panel/deployments/autoscale): the policy decides each
role on a fake clock from that role's engines alone, its reason saying the role first; and the spec's
`roles.<role>.autoscale` is checked at the edge: the targets that fit the role, min 1 at least, at most a
role's engines, the role's replicas within the range (left out: min), no top-level autoscale with roles."""

import pytest

from panel.deployments.autoscale.config import Autoscale, blocks_in, stored_of
from panel.deployments.autoscale.policy import DOWN, HOLD, UP, decide
from panel.deployments.reasons import english
from panel.deployments.spec.spec import DeploymentSpecSerializer
from tests.unit.test_autoscale_policy import IDLE, Clock, busy


def block(target: str, value: float, lo=1, hi=4) -> Autoscale:
    return Autoscale(min=lo, max=hi, target=target, value=value, up_after_s=30.0, down_after_s=60.0)


def test_each_role_is_decided_on_its_own_engines_and_says_its_role():
    prefill, decode = Clock(2), Clock(1)  # two pools on the same clock
    prefill.run(32, IDLE)
    decode.run(32, busy(waiting=5.0, running=4))

    up = decide(block("waiting_per_replica", 4.0), decode.series, 1, decode.now, capacity=8, role="decode")
    assert (up.action, up.to) == (UP, 2)
    assert english(up.reason) == "decode: waiting 5.0/replica > 4.0 for 30 s: 1 → 2"
    assert up.figures == {"waiting_per_replica": 5.0, "target": 4.0, "for_s": 30, "from": 1, "to": 2}

    # The idle prefill pool beside it stays where it is: its own figures, not the decode queue.
    ttft = block("ttft_p90_ms", 500.0)
    hold = decide(ttft, prefill.series, 2, prefill.now, capacity=8, role="prefill")
    assert hold.action == HOLD
    assert english(hold.reason).startswith("prefill: ")
    prefill.run(30, IDLE)
    down = decide(ttft, prefill.series, 2, prefill.now, capacity=8, role="prefill")
    assert (down.action, down.to) == (DOWN, 1)
    assert english(down.reason) == (
        "prefill: TTFT p90 0.0 ms < 250.0 ms and the load fits 1 replicas for 60 s: 2 → 1"
    )


def test_a_plain_decision_carries_no_role():
    clock = Clock(1)
    clock.run(32, busy())
    decision = decide(block("kv_usage", 0.8), clock.series, 1, clock.now, capacity=8)
    assert english(decision.reason) == "KV cache 0.9 > 0.8 for 30 s: 1 → 2"


def split(prefill=None, decode=None, **top) -> dict:
    roles = {"prefill": {"replicas": 1}, "decode": {"replicas": 1}}
    roles["prefill"].update(prefill or {})
    roles["decode"].update(decode or {})
    return {"model": "tiny", "kv_connector": "mooncake", "roles": roles, **top}


def errors_of(raw: dict) -> str:
    serializer = DeploymentSpecSerializer(data=raw)
    assert not serializer.is_valid()
    return str(serializer.errors)


def scaled(target: dict, lo=1, hi=3) -> dict:
    return {"min": lo, "max": hi, "target": target}


def test_a_role_scales_on_the_targets_that_fit_it():
    ok = DeploymentSpecSerializer(
        data=split(
            prefill={"autoscale": scaled({"ttft_p90_ms": 800})},
            decode={"autoscale": scaled({"kv_usage": 0.8}, lo=2), "replicas": 3},
        )
    )
    assert ok.is_valid(), ok.errors
    roles = ok.validated_data["roles"]
    assert roles["decode"]["autoscale"]["target"] == {"kv_usage": 0.8}
    assert roles["decode"]["replicas"] == 3
    assert stored_of(ok.validated_data) == {
        "roles": {"prefill": roles["prefill"]["autoscale"], "decode": roles["decode"]["autoscale"]}
    }
    assert set(blocks_in(stored_of(ok.validated_data))) == {"prefill", "decode"}

    no_kv = errors_of(split(prefill={"autoscale": scaled({"kv_usage": 0.8})}))
    assert "prefill scales on ttft_p90_ms or waiting_per_replica, not kv_usage" in no_kv
    no_ttft = errors_of(split(decode={"autoscale": scaled({"ttft_p90_ms": 800})}))
    assert "decode scales on waiting_per_replica or kv_usage, not ttft_p90_ms" in no_ttft
    assert "'target'" in no_ttft


@pytest.mark.parametrize(
    ("decode", "says"),
    [
        ({"autoscale": scaled({"kv_usage": 0.8}, lo=0)}, "A role keeps at least one engine"),
        ({"autoscale": scaled({"kv_usage": 0.8}, hi=20)}, "at most 16 engines"),
        ({"autoscale": scaled({"kv_usage": 0.8}, lo=2), "replicas": 1}, "outside autoscale's range 2..3"),
    ],
)
def test_a_role_range_that_cannot_hold_is_refused_on_its_field(decode, says):
    assert says in errors_of(split(decode=decode))


def test_a_role_count_left_out_starts_at_min():
    raw = split(decode={"autoscale": scaled({"waiting_per_replica": 4}, lo=2)})
    del raw["roles"]["decode"]["replicas"]
    serializer = DeploymentSpecSerializer(data=raw)
    assert serializer.is_valid(), serializer.errors
    assert serializer.validated_data["roles"]["decode"]["replicas"] == 2


def test_a_top_level_autoscale_with_roles_points_at_each_role():
    said = errors_of(split(autoscale=scaled({"waiting_per_replica": 4})))
    assert "roles.prefill.autoscale" in said
    assert "roles.decode.autoscale" in said
