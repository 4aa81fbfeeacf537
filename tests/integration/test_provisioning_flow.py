"""Preflight and the API's side of installs as operations with real parts: the package store served over
HTTP (live_server), a real Celery worker and Redis, the agent task checking the simulated A2 host. Installs
that run to their end (a venv and pip on the sim host): tests/e2e/test_provisioning_install.py."""

import pytest

from tests.provisioning_helpers import PROFILE, make_node, wait_finished

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


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
