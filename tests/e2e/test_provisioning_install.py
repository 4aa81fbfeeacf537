"""A stack installed as an operation with real parts, the installer's own work included: the package store
served over HTTP (live_server), a real Celery worker and Redis, the agent task installing simulated packages,
creating the venv (python -m venv) and installing stand-in wheels into it with pip on the simulated A2 host;
an install that fails on a broken package resumes from that step, a cancel stops it before its next step.
Preflight and the API's side of installs: tests/integration/test_provisioning_flow.py."""

import hashlib
import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from tests.provisioning_helpers import PROFILE, make_node, wait_finished

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]
BROKEN_TOOLKIT = """#!/bin/sh
echo "Verifying archive integrity...  100%   SHA256 checksums are OK. All good."
echo "[Toolkit] [ERROR]install failed: invalid opp version in the bundled operator package" >&2
exit 1
"""


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
