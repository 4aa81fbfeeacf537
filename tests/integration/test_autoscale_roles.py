"""The autoscaler's step per role of a disaggregated deployment (panel/deployments/autoscale/decider.py) on
the database and Redis, in the harness the per-deployment steps use (test_autoscale_decider.py): figures
stored as the probes store them for each engine row, launches and stops finished as the ingest finishes
them, the step given the time. Each role is decided on its own engines' figures, through scale() with that
role, recorded with its role; the roles scale independently; a role's up that cannot be placed is refused
once; a person's scale of a role the autoscaler owns is refused while the other role's is not; and the spec
the API gives back carries each role's block."""

import copy
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.integration.test_autoscale_decider import BUSY, QUIET, probes
from tests.integration.test_deployment_apply import client, npu_node, pending, put, tiny
from tests.integration.test_deployment_replicas import rows, settle
from tests.integration.test_deployment_roles import split, versions

pytestmark = pytest.mark.django_db

__all__ = ["client", "npu_node", "tiny", "versions"]  # fixtures used by name

DECODE = {"min": 1, "max": 3, "target": {"waiting_per_replica": 2}, "up_after_s": 10, "down_after_s": 20}
PREFILL = {"min": 1, "max": 2, "target": {"ttft_p90_ms": 500}, "up_after_s": 10, "down_after_s": 20}
SLOW_FIRST_TOKEN = {"waiting": 3, "running": 4, "window_ttft_p90": 1.5}


@pytest.fixture(autouse=True)
def empty_history(_wired_to_redis):
    from panel.deployments import metrics_history

    for name in ("chat", "chat-r2", "chat-r3", "chat-d1", "chat-d2", "chat-d3"):
        metrics_history.forget(name)


def scaled_split(prefill=None, decode=None, **overrides):
    body = split(**overrides)
    body["roles"]["decode"]["engine"] = {"max_model_len": 1024}
    if prefill:
        body["roles"]["prefill"]["autoscale"] = prefill
    if decode:
        body["roles"]["decode"]["autoscale"] = decode
    return body


def steps(now) -> dict[str, str]:
    """One tick's autoscale step of both roles: {role: what it did}."""
    from panel.deployments.autoscale.decider import step_all

    return {key.removeprefix("chat:"): done for key, done in step_all(now).items() if key.startswith("chat:")}


def step(now, role):
    return steps(now)[role]


def decisions():
    from panel.deployments.decision_models import Decision

    return [
        (row.kind, row.role, row.outcome, row.figures.get("from"), row.figures.get("to"))
        for row in Decision.objects.filter(deployment_name="chat", kind__startswith="scale_").order_by(
            "time", "pk"
        )
    ]


def roles_wanted():
    from panel.deployments.models import Deployment

    return Deployment.objects.get(name="chat").roles_wanted


def test_a_busy_decode_pool_gets_an_engine_of_its_role_and_the_decision_names_it(client, tiny, versions):
    answer = put(client, "chat", scaled_split(prefill=PREFILL, decode=DECODE))
    assert answer.status_code == 201, answer.json()
    settle()
    start = timezone.now() + timedelta(seconds=30)  # past the cooldown of the apply that created it
    probes(start, 12, QUIET, ("chat",))
    now = probes(start, 12, BUSY, ("chat-d1",))
    assert steps(now) == {"prefill": "hold", "decode": "up"}  # the prefill engine is quiet
    assert [op.target for op in pending("deploy")] == ["chat-d2"]
    new = rows("chat")["chat-d2"]
    assert (new.role, new.spec["parts"][0]["launch"]["kv_transfer_config"]["kv_role"]) == (
        "decode", "kv_consumer",
    )  # fmt: skip
    assert roles_wanted() == {"prefill": 1, "decode": 2}
    from panel.deployments.decision_models import Decision

    made = Decision.objects.get(kind="scale_up")
    assert (made.role, made.actor) == ("decode", "leader")
    assert made.reason == "decode: waiting 6.0/replica > 2.0 for 10 s: 1 → 2"
    assert step(now, "decode") == "deferred"  # chat-d2 still starting
    settle()
    step(now + timedelta(seconds=1), "decode")
    assert decisions() == [("scale_up", "decode", "done", 1, 2)]
    exported = client.get("/api/v1/deployments/chat/?format=spec").json()
    assert exported["roles"]["decode"]["replicas"] == 2
    assert exported["roles"]["decode"]["autoscale"] == DECODE
    assert exported["roles"]["prefill"]["autoscale"] == PREFILL
    assert "autoscale" not in exported
    events = client.get("/api/v1/deployments/chat/events/?role=decode&kind=scale_up").json()["results"]
    assert [(e["role"], e["figures"]["to"]) for e in events] == [("decode", 2)]
    again = put(client, "chat", exported, dry_run="true")
    assert again.json()["result"] == "unchanged", again.json()


def test_the_roles_scale_independently_and_a_quiet_role_drains_its_highest_engine(client, tiny, versions):
    answer = put(client, "chat", scaled_split(prefill=PREFILL, decode=DECODE))
    assert answer.status_code == 201, answer.json()
    settle()
    start = timezone.now() + timedelta(seconds=30)
    probes(start, 12, SLOW_FIRST_TOKEN, ("chat",))
    now = probes(start, 12, BUSY, ("chat-d1",))
    # In one tick: prefill first, its new engine still starting, and decode's step is not held by it.
    assert steps(now) == {"prefill": "up", "decode": "up"}
    assert steps(now) == {"prefill": "hold", "decode": "deferred"}  # prefill at its max 2; chat-d2 starts
    assert sorted(op.target for op in pending("deploy")) == ["chat-d2", "chat-r2"]
    assert roles_wanted() == {"prefill": 2, "decode": 2}
    from panel.deployments.decision_models import Decision

    prefill_up = Decision.objects.get(kind="scale_up", role="prefill")
    assert prefill_up.reason == "prefill: TTFT p90 1500.0 ms > 500.0 ms for 10 s: 1 → 2"
    settle()

    # Later the decode pool goes quiet while prefill stays busy: decode goes back to one engine alone.
    later = now + timedelta(seconds=40)  # past both steps' cooldown
    probes(later, 22, SLOW_FIRST_TOKEN, ("chat", "chat-r2"))
    end = probes(later, 22, QUIET, ("chat-d1", "chat-d2"))
    assert steps(end) == {"prefill": "hold", "decode": "down"}  # prefill at its max
    assert [op.target for op in pending("stop")] == ["chat-d2"]  # stopped through the drain, as a replica
    settle()
    assert roles_wanted() == {"prefill": 2, "decode": 1}
    assert sorted(rows("chat")) == ["chat", "chat-d1", "chat-r2"]
    step(end + timedelta(seconds=1), "decode")
    assert decisions() == [
        ("scale_up", "prefill", "done", 1, 2),
        ("scale_up", "decode", "done", 1, 2),
        ("scale_down", "decode", "done", 2, 1),
    ]


def test_a_role_up_that_cannot_be_placed_is_refused_once_naming_the_role(client, tiny, versions):
    assert put(client, "chat", scaled_split(decode=DECODE)).status_code == 201
    other = {"model": "tiny-qwen", "path": "/models/tiny-qwen", "placement": {"node": "npu-a", "npus": 1}}
    assert put(client, "other", {**other, "replicas": 2}).status_code == 201  # the other two NPUs
    settle()
    now = probes(timezone.now() + timedelta(seconds=30), 12, BUSY, ("chat-d1",))
    assert step(now, "decode") == "refused"
    assert step(now + timedelta(seconds=2), "decode") == "refused"
    assert decisions() == [("scale_refused", "decode", "failed", 1, 2)]
    from panel.deployments.decision_models import Decision

    reason = Decision.objects.get(kind="scale_refused").reason
    assert reason.startswith("decode: waiting 6.0/replica > 2.0 for 10 s: 1 → 2 — ")
    assert "does not fit" in reason
    assert roles_wanted() == {"prefill": 1, "decode": 1}


def test_a_person_scales_only_the_roles_the_autoscaler_does_not_own(client, tiny, versions):
    assert put(client, "chat", scaled_split(decode=DECODE)).status_code == 201
    settle()
    scale_url = "/api/v1/deployments/chat/scale/"
    refused = client.post(scale_url, {"replicas": 2, "role": "decode"}, format="json")
    assert refused.status_code == 400
    said = str(refused.json()["errors"]["replicas"])
    assert "decode engines scale with the load between 1 and 3" in said
    assert client.post(scale_url, {"replicas": 2, "role": "prefill"}, format="json").status_code == 202
    assert roles_wanted() == {"prefill": 2, "decode": 1}


def test_autoscale_per_role_is_a_change_of_its_own_and_a_person_apply_keeps_the_count(client, tiny, versions):
    assert put(client, "chat", scaled_split()).status_code == 201
    settle()
    body = scaled_split(decode={**DECODE, "min": 2, "max": 3})
    del body["roles"]["decode"]["replicas"]  # left out: the autoscaler's, moved into the new range
    dry = put(client, "chat", body, dry_run="true").json()
    assert dry["effect"] == "scale"
    lines = {(line["field"], line.get("role")) for line in dry["changes"]}
    assert lines == {("autoscale", "decode"), ("replicas (autoscaler)", "decode"), ("replicas", "decode")}
    assert put(client, "chat", body).status_code == 202
    assert roles_wanted() == {"prefill": 1, "decode": 2}
    settle()

    outside = copy.deepcopy(body)
    outside["roles"]["decode"]["replicas"] = 1
    outside = put(client, "chat", outside)
    assert outside.status_code == 400
    assert "outside autoscale's range 2..3" in str(outside.json()["errors"]["roles.decode.replicas"])
    body["roles"]["decode"]["replicas"] = 3  # within the range: the count stays the autoscaler's
    assert put(client, "chat", body).json()["result"] == "unchanged"
    assert roles_wanted() == {"prefill": 1, "decode": 2}

    off = scaled_split()
    off["roles"]["decode"]["replicas"] = 2
    turned_off = put(client, "chat", off).json()
    assert (turned_off["effect"], turned_off["changes"][0]["field"]) == ("none", "autoscale")
    from panel.deployments.models import Deployment

    assert Deployment.objects.get(name="chat").autoscale is None
