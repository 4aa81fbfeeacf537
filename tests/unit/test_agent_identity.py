"""workers.identity, written as the attacks it stops: a task signed for one node run by another, a task
whose arguments were changed on the way, an unsigned task, the central agent's task without its SSH node."""

import pytest

from workers.identity import (
    AUTH_KWARG,
    CENTRAL,
    Untrusted,
    check_task,
    seal_for_panel,
    signature,
    signing_key,
    task_auth,
    use_keys,
    verify,
)

KEY_A, KEY_B, CENTRAL_KEY = b"a" * 64, b"b" * 64, b"c" * 32


@pytest.fixture(autouse=True)
def keys():
    use_keys({"node-a": KEY_A, CENTRAL: CENTRAL_KEY})
    yield
    use_keys()


def signed(key, signer, node, kwargs, task="agent.delete_model", task_id="t1"):
    return {**kwargs, AUTH_KWARG: task_auth(key, signer, task, task_id, node, kwargs)}


def test_a_task_the_panel_signed_for_this_node_runs():
    kwargs = signed(KEY_A, "node-a", "node-a", {"operation_id": "x", "path": "/data/models/m"})
    assert check_task("agent.delete_model", "t1", kwargs).node == "node-a"


def test_a_task_signed_with_another_nodes_key_is_refused():
    kwargs = signed(KEY_B, "node-a", "node-a", {"path": "/etc"})
    with pytest.raises(Untrusted, match="does not verify"):
        check_task("agent.delete_model", "t1", kwargs)


def test_a_task_for_another_node_is_refused_even_with_its_valid_signature():
    kwargs = signed(KEY_B, "node-b", "node-b", {"path": "/data/models/m"})
    with pytest.raises(Untrusted, match="whose key this agent does not hold"):
        check_task("agent.delete_model", "t1", kwargs)


def test_changed_arguments_a_renamed_task_or_a_replayed_id_break_the_signature():
    kwargs = signed(KEY_A, "node-a", "node-a", {"path": "/data/models/m"})
    with pytest.raises(Untrusted):
        check_task("agent.delete_model", "t1", {**kwargs, "path": "/etc"})
    with pytest.raises(Untrusted):
        check_task("agent.install_agent", "t1", kwargs)
    with pytest.raises(Untrusted):
        check_task("agent.delete_model", "t2", kwargs)


def test_an_unsigned_task_is_refused():
    with pytest.raises(Untrusted, match="carries no signature"):
        check_task("agent.install_agent", "t1", {"script": "rm -rf /"})


def test_a_node_signer_cannot_claim_another_node():
    kwargs = signed(KEY_A, "node-a", "node-b", {"path": "/x"})
    with pytest.raises(Untrusted, match="signed as"):
        check_task("agent.delete_model", "t1", kwargs)


def test_the_central_agent_runs_only_tasks_naming_their_ssh_node_and_nodes_get_no_ssh_target():
    good = signed(CENTRAL_KEY, CENTRAL, "ssh-1", {"target": {"node": "ssh-1"}}, task="agent.inventory")
    assert check_task("agent.inventory", "t1", good).node == "ssh-1"
    other = signed(CENTRAL_KEY, CENTRAL, "ssh-1", {"target": {"node": "ssh-2"}}, task="agent.inventory")
    with pytest.raises(Untrusted, match="must name its SSH node"):
        check_task("agent.inventory", "t1", other)
    smuggled = signed(KEY_A, "node-a", "node-a", {"target": {"node": "ssh-1"}}, task="agent.inventory")
    with pytest.raises(Untrusted, match="may not carry an SSH target"):
        check_task("agent.inventory", "t1", smuggled)


def test_what_an_agent_sends_is_signed_over_its_stamp_the_task_the_node_and_the_body():
    envelope = seal_for_panel("panel.heartbeat", "node-a", {"node": "node-a", "x": 1})
    parts = (envelope["stamp"].encode(), b"panel.heartbeat", b"node-a", b'{"node":"node-a","x":1}')
    assert envelope["signer"] == "node-a"
    assert verify(KEY_A, envelope["sig"], *parts)
    assert not verify(KEY_B, envelope["sig"], *parts)
    assert envelope["sig"] == signature(KEY_A, *parts)


def test_the_central_agent_holds_the_key_it_was_given_and_nothing_derived_from_the_panels_material(
    monkeypatch,
):
    from workers.identity import CENTRAL_ENV, central_key, key_for

    use_keys()
    monkeypatch.setenv(CENTRAL_ENV, "1")
    monkeypatch.setenv("ASCEND_PANEL_NODE_NAME", "node-a")
    monkeypatch.setenv("PANEL_SECRETS_KEY", "the-panels-material")
    monkeypatch.delenv("ASCEND_PANEL_AGENT_KEY_FILE", raising=False)
    monkeypatch.setenv("ASCEND_PANEL_AGENT_KEY", central_key("the-panels-material").decode())
    assert key_for(CENTRAL) == central_key("the-panels-material")
    assert key_for("node-a") is None  # the central agent speaks for no agent node, whatever its env says
    use_keys()
    monkeypatch.delenv("ASCEND_PANEL_AGENT_KEY")
    with pytest.raises(Untrusted, match="agent_credential --central"):
        signing_key(CENTRAL)
