"""The audit log: who did what, when and from where, for every action that changes who may do what or what
runs as root on the fleet; admins alone read it (page and API); entries past the retention are pruned."""

import hashlib
from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import Group
from django.test import Client
from django.utils import timezone

from panel.accounts.roles import ADMIN
from panel.audit import actions
from panel.audit.models import AuditEntry
from panel.audit.services import record
from panel.catalog.models import Model, ModelArtifact
from panel.core.domain.choices import NpuHealth
from panel.nodes.models import Node, Npu
from tests.conftest import api_client_for
from tests.wizard_steps import SMALL_QWEN

pytestmark = pytest.mark.django_db

OFFICE = "198.51.100.30"


def api_from_office(user):
    client = api_client_for(user)
    client.defaults["REMOTE_ADDR"] = OFFICE
    return client


def last(action) -> AuditEntry:
    return AuditEntry.objects.filter(action=action).latest("pk")


def test_token_creation_and_revocation_are_recorded_with_who_and_where(charlie):
    client = api_from_office(charlie)
    token = client.post("/api/v1/tokens/", {"name": "ci"}, format="json").json()
    assert client.delete(f"/api/v1/tokens/{token['id']}/").status_code == 204
    created, revoked = last(actions.TOKEN_CREATED), last(actions.TOKEN_REVOKED)
    assert (created.actor, created.target, created.ip) == (charlie, "ci", OFFICE)
    assert created.details["prefix"] == token["token"][:10]  # never the token itself
    assert token["token"] not in str(created.details)
    assert (revoked.actor, revoked.target, revoked.ip) == (charlie, "ci", OFFICE)


def test_token_pages_record_the_same(charlie):
    client = Client(REMOTE_ADDR=OFFICE)
    client.force_login(charlie)
    client.post("/accounts/tokens/", {"name": "laptop", "lifetime": "30"})
    assert last(actions.TOKEN_CREATED).target == "laptop"


def test_a_role_change_in_the_admin_is_recorded(alice, charlie):
    alice.is_staff = alice.is_superuser = True  # who manages users in Django's admin (as `admin` does)
    alice.save()
    client = Client(REMOTE_ADDR=OFFICE)
    client.force_login(alice)
    page = client.get(f"/admin/auth/user/{charlie.pk}/change/")
    assert page.status_code == 200
    form = {
        "username": "charlie",
        "is_active": "on",
        "groups": [Group.objects.get(name=ADMIN).pk],
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
        "initial-date_joined_0": "2026-01-01",
        "initial-date_joined_1": "00:00:00",
    }
    response = client.post(f"/admin/auth/user/{charlie.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:3000]
    entry = last(actions.ROLE_CHANGED)
    assert (entry.actor, entry.target, entry.ip) == (alice, "charlie", OFFICE)
    assert entry.details == {"before": "viewer", "after": "admin"}


def test_adding_and_removing_nodes_is_recorded(alice):
    client = api_from_office(alice)
    assert client.post("/api/v1/nodes/", {"name": "npu-09"}, format="json").status_code == 201
    added = last(actions.NODE_ADDED)
    assert (added.actor, added.target, added.ip, added.details["transport"]) == (
        alice,
        "npu-09",
        OFFICE,
        "agent",
    )
    node = Node.objects.create(name="old-box")
    assert client.delete(f"/api/v1/nodes/{node.pk}/?force=true").status_code == 204
    removed = last(actions.NODE_REMOVED)
    assert (removed.actor, removed.target, removed.ip, removed.details["force"]) == (
        alice,
        "old-box",
        OFFICE,
        True,
    )


def test_deploying_and_deleting_are_recorded(bob):
    node = Node.objects.create(name="a2-node", address="127.0.0.1")
    Npu.objects.create(node=node, npu_id=0, logic_id=0, name="910B3", health=NpuHealth.OK, hbm_total_mb=65536)
    model = Model.objects.create(name="Qwen/Qwen2.5-0.5B-Instruct", facts=SMALL_QWEN)
    artifact = ModelArtifact.objects.create(model=model, node=node, path="/models/q", ready=True)
    body = {
        "name": "audited",
        "model": model.pk,
        "artifact": artifact.pk,
        "nodes": [{"node": "a2-node", "npus": [0]}],
        "max_model_len": 4096,
        "extra_flags": {"--max-num-seqs": 8},
    }
    client = api_from_office(bob)
    created = client.post("/api/v1/deployments/", body, format="json")
    assert created.status_code == 201, created.content
    entry = last(actions.DEPLOYMENT_CREATED)
    assert (entry.actor, entry.target, entry.ip) == (bob, "audited", OFFICE)
    assert entry.details["extra_flags"] == {"--max-num-seqs": 8}
    assert client.delete(f"/api/v1/deployments/{created.json()['id']}/").status_code == 202
    assert (last(actions.DEPLOYMENT_DELETED).actor, last(actions.DEPLOYMENT_DELETED).target) == (
        bob,
        "audited",
    )


def test_an_install_is_recorded_with_the_package_checksums_it_was_offered(alice, settings, tmp_path):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from panel.provisioning.store import add_package

    settings.DATA_DIR = tmp_path
    package = add_package(
        SimpleUploadedFile("torch_npu-2.7.1-cp311-cp311-linux_aarch64.whl", b"w"),
        user=alice,
        vendor_sha256=hashlib.sha256(b"w").hexdigest(),
    )
    Node.objects.create(name="cpu-box", transport="agent")
    response = api_from_office(alice).post(
        "/api/v1/node-stacks/cpu-box/install/", {"profile": "cpu"}, format="json"
    )
    assert response.status_code == 202, response.content
    entry = last(actions.INSTALL_STARTED)
    assert (entry.actor, entry.target, entry.ip) == (alice, "cpu-box", OFFICE)
    assert entry.details["packages"] == {package.name: package.sha256}
    assert entry.details["operation"] == response.json()["id"]


def test_only_admins_read_the_audit_log(alice, bob, charlie):
    record(alice, actions.NODE_ADDED, "npu-01")
    for user in (bob, charlie):
        assert api_client_for(user).get("/api/v1/audit/").status_code == 403
        client = Client()
        client.force_login(user)
        assert client.get("/audit/").status_code == 403
    assert Client().get("/api/v1/audit/").status_code in (401, 403)
    rows = api_client_for(alice).get("/api/v1/audit/", {"action": actions.NODE_ADDED}).json()["results"]
    assert [(r["actor"], r["action"], r["target"]) for r in rows] == [("alice", actions.NODE_ADDED, "npu-01")]


def test_the_audit_log_is_read_only(alice):
    entry = record(alice, actions.NODE_ADDED, "npu-01")
    client = api_client_for(alice)
    assert client.post("/api/v1/audit/", {"action": "x"}, format="json").status_code == 405
    assert client.delete(f"/api/v1/audit/{entry.pk}/").status_code == 405
    assert client.patch(f"/api/v1/audit/{entry.pk}/", {"target": "x"}, format="json").status_code == 405


def test_the_page_and_the_api_filter_by_who_what_and_when(alice, bob):
    record(alice, actions.NODE_ADDED, "npu-01")
    record("mallory", actions.SIGNIN_FAILED, "mallory")
    record(bob, actions.DEPLOYMENT_CREATED, "qwen")
    client = api_client_for(alice)
    rows = client.get("/api/v1/audit/", {"action": actions.SIGNIN_FAILED}).json()["results"]
    assert [r["actor"] for r in rows] == ["mallory"]
    assert [r["target"] for r in client.get("/api/v1/audit/", {"actor": "bob"}).json()["results"]] == ["qwen"]
    future = (timezone.now() + timedelta(hours=1)).isoformat()
    assert client.get("/api/v1/audit/", {"since": future}).json()["results"] == []
    page = Client()
    page.force_login(alice)
    html = page.get("/audit/", {"actor": "mallory"}).content.decode()
    assert "Sign-in failed" in html
    assert "qwen" not in html
    assert 'href="/audit/"' in page.get("/").content.decode()  # in the admin's navigation


def test_the_navigation_shows_the_audit_log_to_admins_only(bob):
    client = Client()
    client.force_login(bob)
    assert 'href="/audit/"' not in client.get("/").content.decode()


def test_entries_older_than_the_retention_are_pruned_by_the_beat_task(alice, settings):
    from panel.audit.tasks import prune
    from panel.beat import beat_schedule

    with time_machine.travel(timezone.now() - timedelta(days=91)):
        record(alice, actions.NODE_ADDED, "ancient")
    with time_machine.travel(timezone.now() - timedelta(days=89)):
        record(alice, actions.NODE_ADDED, "recent")
    assert prune() == 1
    assert list(AuditEntry.objects.values_list("target", flat=True)) == ["recent"]
    assert beat_schedule()["audit-prune"]["task"] == prune.name


def test_the_force_fail_action_is_ready_for_the_operations_app(alice):
    entry = record(alice, actions.OPERATION_FORCE_FAILED, "op-1", reason="agent gone")
    assert entry.get_action_display() == "Operation force-failed"


def test_work_without_a_request_is_recorded_without_a_user_or_an_address(bob):
    entry = record(None, actions.NODE_REMOVED, "x")  # Celery, the shell: nobody to name, no address
    assert (entry.actor, entry.actor_name, entry.ip) == (None, "", None)


@pytest.mark.django_db
def test_an_address_filter_that_is_no_address_is_a_field_error_not_a_server_error(alice):
    response = api_client_for(alice).get("/api/v1/audit/", {"ip": "not-an-address"})
    assert response.status_code == 400
    assert "ip" in response.json()["errors"]
