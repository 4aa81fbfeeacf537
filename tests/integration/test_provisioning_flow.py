"""Preflight and install as operations with real parts: the package store served over HTTP (live_server),
a real Celery worker and Redis, the agent task installing simulated packages and stand-in wheels into the
simulated A2 host."""

import hashlib
import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from tests.integration.conftest import TEST_NODE

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]
PROFILE = "0.11.0"  # CANN 8.3.RC2: the sim A2's driver stays, toolkit / ops / NNAL and the venv go in
BROKEN_TOOLKIT = """#!/bin/sh
echo "Verifying archive integrity...  100%   SHA256 checksums are OK. All good."
echo "[Toolkit] [ERROR]install failed: invalid opp version in the bundled operator package" >&2
exit 1
"""


def make_node():
    from panel.nodes.models import Node

    return Node.objects.create(name=TEST_NODE, transport="agent")


def wait_finished(operation, timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        operation.refresh_from_db()
        if (
            operation.is_terminal
            and operation.final_seq is not None
            and operation.last_seq >= operation.final_seq
        ):
            return operation
        time.sleep(0.2)
    raise AssertionError(f"operation {operation.kind} still {operation.status} at {operation.stage!r}")


def upload(name, text, admin):
    """An admin replaces a stored package: the upload waits, then the admin confirms its checksum."""
    from panel.provisioning.store import add_package, confirm_replacement

    vendor_sha256 = hashlib.sha256(text.encode()).hexdigest()
    package = add_package(SimpleUploadedFile(name, text.encode()), user=admin, vendor_sha256=vendor_sha256)
    if package.pending_sha256:
        package = confirm_replacement(package, package.pending_sha256, user=admin)
    return package


def step_states(operation):
    events = operation.events.filter(kind="log").order_by("seq")
    return {e.payload["step"]: e.payload["step_state"] for e in events if "step_state" in e.payload}


def test_preflight_stores_a_checklist_and_changes_nothing(celery_worker, store, live_server, alice):
    from panel.provisioning.services import stack_of, start_preflight

    node = make_node()
    ascend = celery_worker.sim_root / "usr/local/Ascend"
    before = sorted(p.name for p in ascend.rglob("*"))
    operation = wait_finished(start_preflight(node, PROFILE, user=alice, panel_url=live_server.url))
    assert operation.status == "succeeded", (operation.error, operation.hint)
    stack = stack_of(node)
    checks = {entry["check"]: entry for entry in stack.preflight}
    assert checks["npus"]["status"] == "pass"
    assert checks["npus"]["detail"] == "8 NPUs, all OK"
    assert checks["packages"]["status"] == "pass"
    assert all(entry["fix"] for entry in stack.preflight if entry["status"] != "pass")
    assert [s["name"] for s in stack.preflight_plan][:3] == ["cann_toolkit", "ops", "nnal"]
    assert sorted(p.name for p in ascend.rglob("*")) == before


def test_install_fails_on_a_broken_package_and_resumes_from_that_step(
    celery_worker, store, live_server, alice
):
    from panel.provisioning.models import StackStatus
    from panel.provisioning.services import installed_stack, resume_install, stack_of, start_install

    node = make_node()
    good = celery_worker.sim_root / "good-toolkit.run"
    from workers.sim.installers import make_sim_package

    good = make_sim_package("toolkit", "8.3.RC2", celery_worker.sim_root / "good")
    upload(good.name, BROKEN_TOOLKIT, alice)

    failed = wait_finished(start_install(node, PROFILE, user=alice, panel_url=live_server.url))
    assert failed.status == "failed"
    assert failed.error.startswith("step cann_toolkit:")
    assert "CANN" in failed.hint  # the diagnose finding for "invalid opp version"
    stack = stack_of(node)
    assert (stack.status, stack.failed_step) == (StackStatus.FAILED, "cann_toolkit")
    assert step_states(failed)["fetch_packages"] == "done"  # downloaded over HTTP, sha256 checked

    upload(good.name, good.read_text(), alice)  # the fixed package replaces the broken one
    resumed = wait_finished(resume_install(node, user=alice, panel_url=live_server.url))
    assert resumed.status == "succeeded", (resumed.error, resumed.hint)
    assert resumed.progress == 100.0
    states = step_states(resumed)
    assert states["fetch_packages"] == "done"  # fetched the replaced file again
    assert states["cann_toolkit"] == "done"
    assert states["verify_npu"] == "done"
    assert "venv" in states
    assert "driver" not in states

    node.refresh_from_db()
    stack = installed_stack(node)
    assert stack["profile"] == "vllm-ascend-0.11.0"
    assert stack["venv"].endswith("/opt/ascend-panel/venvs/vllm-ascend-0.11.0")
    assert stack["set_env"][0].endswith("ascend-toolkit/set_env.sh")
    assert node.versions["cann-toolkit"] == "8.3.RC2"
    assert node.versions["vllm-ascend"] == "0.11.0"


def test_a_cancel_stops_the_install_before_its_next_step(celery_worker, store, live_server, alice):
    from panel.provisioning.models import StackStatus
    from panel.provisioning.services import cancel, stack_of, start_install

    node = make_node()
    operation = start_install(node, PROFILE, user=alice, panel_url=live_server.url)
    deadline = time.monotonic() + 60
    while "venv" not in step_states(operation):
        assert time.monotonic() < deadline, "the install never reached the venv step"
        time.sleep(0.05)
    cancel(operation)
    wait_finished(operation)
    assert operation.status == "cancelled"
    stack = stack_of(node)
    assert stack.status == StackStatus.CANCELLED
    states = step_states(operation)
    assert states[stack.failed_step] == "cancelled"
    assert "record_stack" not in states or states["record_stack"] == "cancelled"


def test_download_needs_the_token_of_an_open_operation(client, store, alice):
    from panel.provisioning.models import PackageFile

    package = PackageFile.objects.first()
    response = client.get(f"/provisioning/packages/{package.sha256}/{package.name}")
    assert response.status_code == 403
    response = client.get(f"/provisioning/packages/{package.sha256}/{package.name}?token=forged:token")
    assert response.status_code == 403


@pytest.mark.usefixtures("_wired_to_redis")
def test_an_install_retried_with_the_same_idempotency_key_starts_once(store, alice):
    from panel.operations.models import Operation
    from tests.conftest import api_client_for

    node = make_node()
    client = api_client_for(alice)
    url = f"/api/v1/node-stacks/{node.name}/install/"
    first = client.post(url, {"profile": PROFILE}, format="json", HTTP_IDEMPOTENCY_KEY="install-1")
    again = client.post(url, {"profile": PROFILE}, format="json", HTTP_IDEMPOTENCY_KEY="install-1")
    assert first.status_code == 202, first.json()
    assert again.json() == first.json()
    assert again["Idempotent-Replay"] == "true"
    assert Operation.objects.filter(node=node, kind="install").count() == 1


@pytest.mark.usefixtures("_wired_to_redis")
def test_an_install_waiting_for_a_reboot_resumes_when_the_agent_is_back(store, alice):
    from panel.nodes.services import record_heartbeat
    from panel.operations.models import Operation
    from panel.provisioning.models import StackStatus
    from panel.provisioning.services import stack_of, start_install
    from workers.contracts import Heartbeat, utcnow

    node = make_node()
    first = start_install(node, PROFILE, user=alice, panel_url="http://panel.example:8000")
    stack = stack_of(node)
    stack.status, stack.failed_step = StackStatus.WAITING_REBOOT, "reboot"
    stack.save()
    first.status = "succeeded"
    first.save()
    node.status = "offline"  # the host rebooted
    node.save()

    record_heartbeat(Heartbeat(node=node.name, time=utcnow(), agent_version="test").model_dump(mode="json"))

    resumed = Operation.objects.filter(node=node, kind="install").exclude(pk=first.pk).get()
    assert resumed.params["resume_from"] == "reboot"
    assert resumed.created_by == alice
    assert stack_of(node).status == StackStatus.INSTALLING


def test_the_sim_store_holds_every_package_each_matrix_profile_needs_on_each_sim_chip(store):
    from panel.provisioning.models import PackageFile
    from workers.ascend.compat import load_matrix
    from workers.steps.packages import package_filename

    names = set(PackageFile.objects.values_list("name", flat=True))
    missing = []
    for profile in load_matrix():
        for chip in ("910b", "310p"):
            if chip not in profile.chips:
                continue
            wanted = [package_filename(kind, profile.cann, chip=chip) for kind in ("toolkit", "ops", "nnal")]
            wanted += [
                f"vllm_ascend-{profile.vllm_ascend}-py3-none-any.whl",
                f"torch-{profile.torch}-py3-none-any.whl",
            ]
            missing += [f"{profile.vllm_ascend}/{chip}: {name}" for name in wanted if name not in names]
    assert not missing


def test_the_default_profile_passes_the_package_check_on_the_sim_host(
    celery_worker, store, live_server, alice
):
    from panel.provisioning.profiles import profile_rows
    from panel.provisioning.services import stack_of, start_preflight

    node = make_node()
    default = profile_rows()[0]["key"]
    operation = wait_finished(start_preflight(node, default, user=alice, panel_url=live_server.url))
    assert operation.status == "succeeded", (operation.error, operation.hint)
    checks = {entry["check"]: entry for entry in stack_of(node).preflight}
    assert checks["packages"]["status"] == "pass", checks["packages"]
    assert [entry for entry in stack_of(node).preflight if entry["status"] == "fail"] == []
