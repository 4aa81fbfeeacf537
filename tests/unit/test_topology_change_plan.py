"""The plan of a change to a deployment with roles (panel/deployments/spec/topology_change.py,
role_members.py), without a database: which engines a spec wants and their names, the kind of topology a
spec has (a change of kind cannot roll), the effect a change has, what each engine is said to do, and each
engine's own spec (its port, a surge's picked port)."""

import pytest

from panel.deployments.spec import role_members
from panel.deployments.spec.topology_change import Layout, _effect, _steps, kind_of, targets_of


def roles_spec(prefill=1, decode=2, connector="mooncake", port=None):
    engine = {"max_model_len": 2048, "served_model_name": "", **({"port": port} if port else {})}
    return {
        "name": "chat",
        "replicas": 1,
        "engine": engine,
        "engine_given": ["max_model_len", *(["port"] if port else [])],
        "placement": {"node": "a2", "npus": 1},
        "kv_connector": connector,
        "roles": {
            "prefill": {"replicas": prefill, "placement": None, "engine": {}, "engine_given": []},
            "decode": {
                "replicas": decode,
                "placement": {"node": "a2-2", "npus": 2},
                "engine": {"max_model_len": 1024},
                "engine_given": ["max_model_len"],
            },
        },
    }


def test_the_engines_a_spec_wants_are_named_per_role_and_plain_replicas_as_before():
    assert targets_of(roles_spec(prefill=2, decode=2)) == [
        ("prefill", 1, "chat"), ("prefill", 2, "chat-r2"), ("decode", 1, "chat-d1"), ("decode", 2, "chat-d2"),
    ]  # fmt: skip
    assert targets_of({"name": "chat", "replicas": 3}) == [
        ("", 1, "chat"),
        ("", 2, "chat-r2"),
        ("", 3, "chat-r3"),
    ]


def test_a_prefill_engine_of_a_plain_deployment_keeps_its_row_name():
    """Plain replica i and prefill engine i share a name: plain -> prefill/decode relaunches them in place."""
    assert {name for _r, _i, name in targets_of(roles_spec(prefill=2))} >= {"chat", "chat-r2"}
    assert role_members.member_index("chat", "chat-r2", "prefill") == 2
    assert role_members.member_index("chat", "chat-d3", "decode") == 3
    assert role_members.member_index("chat", "chat-d3", "prefill") == 0
    assert role_members.member_index("chat", "chat-r2", "decode") == 0


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        (roles_spec(), "mooncake"),
        (roles_spec(connector="nixl"), "nixl"),
        ({"name": "chat", "replicas": 2, "roles": None}, "plain"),
    ],
)
def test_the_kind_of_a_spec_is_plain_or_its_connector(spec, kind):
    assert kind_of(spec) == kind


def layout(stale=(), new=(), removed=()):
    return Layout(
        targets=[("decode", 1, "chat-d1"), ("decode", 2, "chat-d2")],
        plans={},
        new=list(new),
        stale=list(stale),
        removed=list(removed),
    )


@pytest.mark.parametrize(
    ("fields", "plan", "serving", "regrown", "state", "effect"),
    [
        (["routing", "labels"], layout(), True, False, "running", "none"),
        (["replicas"], layout(new=["chat-d2"]), True, False, "running", "scale"),
        (["roles.decode.engine.max_model_len"], layout(stale=["chat-d1"]), True, False, "running", "rolling"),
        (["roles", "kv_connector"], layout(stale=["chat"]), True, True, "running", "topology"),
        (["roles", "kv_connector"], layout(stale=["chat"]), False, True, "stopped", "none"),
        (["state", "replicas"], layout(new=["chat-d2"]), False, False, "running", "start"),
        (["state"], layout(), False, False, "stopped", "stop"),
    ],
)
def test_the_effect_of_a_change(fields, plan, serving, regrown, state, effect):
    changes = [{"field": name, "from": 1, "to": 2} for name in fields]
    assert _effect(changes, plan, serving, regrown, state) == effect


def test_the_steps_say_what_each_engine_does_new_ones_first_removed_ones_last():
    plan = layout(stale=["chat-d1"], new=["chat-d2"], removed=["chat-r2"])
    plan.removed_roles = {"chat-r2": "prefill"}
    assert _steps(plan, "rolling", starts=True) == [
        {"action": "start", "name": "chat-d2", "role": "decode"},
        {"action": "roll", "name": "chat-d1", "role": "decode"},
        {"action": "stop", "name": "chat-r2", "role": "prefill"},
    ]
    assert _steps(plan, "topology", starts=True)[1]["action"] == "restart"  # a change of kind: all at once
    stopped = _steps(plan, "none", starts=False)  # a deployment that does not serve keeps it for later
    assert [step["action"] for step in stopped] == ["create", "update", "stop"]


def test_each_engine_takes_its_roles_settings_and_a_port_after_the_engines_before_it():
    spec = roles_spec(prefill=2, decode=2, port=9000)
    first_decode = role_members.member_spec(spec, "decode", 1)
    assert (first_decode["name"], first_decode["engine"]["port"]) == ("chat-d1", 9004)  # after 2 prefill
    assert first_decode["engine"]["max_model_len"] == 1024
    assert first_decode["placement"] == {"node": "a2-2", "npus": 2}
    assert first_decode["engine"]["served_model_name"] == "chat"
    prefill = role_members.member_spec(spec, "prefill", 2)
    assert (prefill["engine"]["port"], prefill["engine"]["max_model_len"]) == (9002, 2048)
    assert prefill["placement"] == {"node": "a2", "npus": 1}  # the role gave none: the top-level one
    surge = role_members.member_spec(spec, "decode", 3)  # above the role's count: a rolling update's surge
    assert "port" not in surge["engine"]
    assert "port" not in surge["engine_given"]
