"""Join tokens as an attacker would use them: a second pending token for a name, a token that was never
meant to rotate a live node's credential, a token asked for by someone who is not an admin. One pending
token per name; a live node's credential rotates only when an admin asked for it, and that is audited."""

import pytest
from django.test import Client

from panel.audit import actions as audit
from panel.audit.models import AuditEntry
from panel.nodes.agents.join import issue_join_token
from panel.nodes.agents.trust import agent_key
from panel.nodes.models import JoinToken, Node
from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db


def join(node_name, token):
    return Client().post(
        "/nodes/agent/join/", {"node": node_name, "token": token}, content_type="application/json"
    )


def add_agent_node(admin, name):
    answer = api_client_for(admin).post("/api/v1/nodes/", {"name": name}, format="json")
    assert answer.status_code == 201, answer.content
    return answer.json()["join_token"]


def test_a_new_join_token_cancels_the_pending_one_for_that_name(alice):
    first = add_agent_node(alice, "npu-31")
    second = add_agent_node(alice, "npu-31")  # not joined yet, so the name may be added again

    assert join("npu-31", first).status_code == 403
    assert join("npu-31", second).status_code == 200
    assert JoinToken.objects.filter(node_name="npu-31", used__isnull=True).count() == 0


def test_a_token_not_made_for_rotation_cannot_take_over_a_joined_node(alice):
    key = join("npu-32", add_agent_node(alice, "npu-32")).json()["agent_key"]
    node = Node.objects.get(name="npu-32")
    leaked = issue_join_token("npu-32")  # e.g. made by a script or a race, never asked to rotate

    taken = join("npu-32", leaked)

    assert taken.status_code == 403
    assert "rotate" in taken.json()["detail"]
    node.refresh_from_db()
    assert agent_key(node).decode() == key  # the node keeps its credential


def test_an_admin_rotates_a_joined_nodes_credential_only_by_saying_so(alice):
    old_key = join("npu-33", add_agent_node(alice, "npu-33")).json()["agent_key"]
    api = api_client_for(alice)

    unconfirmed = api.post("/api/v1/nodes/npu-33/join-token/", {}, format="json")
    assert unconfirmed.status_code == 400
    assert "rotate_credential" in unconfirmed.json()["errors"]

    confirmed = api.post("/api/v1/nodes/npu-33/join-token/", {"rotate_credential": True}, format="json")
    assert confirmed.status_code == 201, confirmed.content
    new_key = join("npu-33", confirmed.json()["join_token"]).json()["agent_key"]
    assert new_key != old_key
    issued = AuditEntry.objects.filter(action=audit.NODE_JOIN_TOKEN_ISSUED, target="npu-33").latest("time")
    assert (issued.actor, issued.details["rotate_credential"]) == (alice, True)


def test_operators_cannot_make_join_tokens_for_a_joined_node(alice, bob):
    join("npu-34", add_agent_node(alice, "npu-34"))
    answer = api_client_for(bob).post(
        "/api/v1/nodes/npu-34/join-token/", {"rotate_credential": True}, format="json"
    )
    assert answer.status_code == 403
    assert not JoinToken.objects.filter(node_name="npu-34", used__isnull=True).exists()
