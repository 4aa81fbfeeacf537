"""A deployment's diagnostics bundle end to end: collected on demand from the deployment page through the
node's real agent on the sim host, uploaded over HTTP with the operation's token (live_server), packed by the
panel and downloaded from the page and the API; and asked for by the panel itself after a failed start."""

# ruff: noqa: E501  (log lines are quoted whole)

import asyncio
import io
import json
import os
import tarfile
import time

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction
from django.test import Client

from tests.conftest import api_client_for
from tests.integration.conftest import TEST_NODE
from workers.engine.running import runtime

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]
ENGINE_LOG = (
    "(EngineCore_DP0 pid=612) INFO 12-05 07:50:41 [model_runner_v1.py:2345] Starting to load model\n"
    "(EngineCore_DP0 pid=612) RuntimeError: SetPrecisionMode:torch_npu/csrc/framework/LazyInitAclops.cpp:155 "
    "NPU function error: at_npu::native::AclSetCompileopt(aclCompileOpt::ACL_PRECISION_MODE, precision_mode), "
    "error code is 500001\n"
)


@pytest.fixture
def failed_deployment(celery_worker):
    from panel.catalog.models import Model
    from panel.core.domain.choices import DeploymentState
    from panel.deployments.models import Deployment
    from panel.nodes.models import Node

    node = Node.objects.create(name=TEST_NODE, transport="agent")
    deployment = Deployment.objects.create(
        name="broken-one",
        model=Model.objects.create(name="qwen", source="path"),
        spec={
            "port": 8000,
            "parts": [{"node": TEST_NODE, "role": "single", "launch": {"env": {"TASK_QUEUE_ENABLE": "2"}}}],
        },
        observed_state=DeploymentState.FAILED,
    )
    deployment.nodes.set([node])
    log = runtime.log_path_for(str(celery_worker.sim_root), deployment.name)
    os.makedirs(os.path.dirname(log), exist_ok=True)
    with open(log, "w") as handle:
        handle.write(ENGINE_LOG)
    plog = celery_worker.sim_root / os.environ["HOME"].lstrip("/") / "ascend/log/debug/plog"
    plog.mkdir(parents=True, exist_ok=True)
    (plog / "plog-612_20261205075041.log").write_text(
        "[ERROR] GE(612,python3):init runtime platform info failed\n"
    )
    return deployment


def received(layer, channel) -> list[dict]:
    """The panel messages already waiting on `channel` (a browser's socket stands in here)."""
    messages = []

    async def drain():
        while True:
            try:
                event = await asyncio.wait_for(layer.receive(channel), 2)
            except TimeoutError:
                return
            messages.append(event["message"])

    async_to_sync(drain)()
    return messages


def wait_ready(bundle, timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        bundle.refresh_from_db()
        if bundle.status != "collecting":
            return bundle
        time.sleep(0.3)
    raise AssertionError(f"bundle still collecting: {bundle.nodes}")


def test_collected_from_the_page_and_downloaded_as_one_archive(
    failed_deployment, live_server, settings, bob, charlie
):
    from panel.forensics.models import DiagnosticsBundle

    settings.PANEL_URL = live_server.url
    layer = get_channel_layer()
    page_socket = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("deployment.broken-one", page_socket)
    client = Client()
    client.force_login(bob)
    assert client.post("/forensics/deployments/broken-one/collect/").status_code == 302
    bundle = wait_ready(DiagnosticsBundle.objects.get())
    assert bundle.status == "ready", bundle.summary
    assert bundle.trigger == "on_demand"
    # The page is told twice (started, packed) and fetches its box again: "Ready" without a reload.
    told = [
        message for message in received(layer, page_socket) if message["type"] == "deployment.diagnostics"
    ]
    assert [message["bundle"] for message in told] == [bundle.pk, bundle.pk]

    page = Client()
    page.force_login(charlie)
    html = page.get("/deployments/broken-one/").content.decode()
    assert 'data-testid="download-diagnostics"' in html
    box = page.get("/forensics/deployments/broken-one/bundles/").content.decode()
    assert 'data-testid="download-diagnostics"' in box
    assert "Collecting" not in box
    assert 'data-testid="collect-diagnostics"' not in html  # a viewer downloads, does not collect
    download = page.get(f"/forensics/bundles/{bundle.pk}/download/")
    assert download["Content-Disposition"].startswith('attachment; filename="diagnostics-broken-one-')
    with tarfile.open(fileobj=io.BytesIO(b"".join(download.streaming_content)), mode="r:gz") as tar:
        names = {entry.name.split("/", 1)[1] for entry in tar if entry.isfile()}
        root = tar.getnames()[0].split("/")[0]
        manifest = json.loads(tar.extractfile(f"{root}/MANIFEST.json").read())
    assert {
        "MANIFEST.json", "timeline.txt", f"{TEST_NODE}/engine.log", f"{TEST_NODE}/npu-smi-info.txt",
        f"{TEST_NODE}/versions.json", f"{TEST_NODE}/environment.txt", f"{TEST_NODE}/manifest.json",
        f"{TEST_NODE}/plog/debug/plog/plog-612_20261205075041.log",
    } <= names  # fmt: skip
    assert manifest["findings"][TEST_NODE][0]["code"] == "soc_init_failed"
    assert manifest["clocks"][TEST_NODE]["skew_s"] < 60

    api = api_client_for(charlie)
    listed = api.get("/api/v1/diagnostics/", {"deployment": "broken-one"}).json()
    assert [row["id"] for row in listed["results"]] == [bundle.pk]
    again = api.get(f"/api/v1/diagnostics/{bundle.pk}/download/")
    assert again.status_code == 200
    assert again["Content-Type"] == "application/gzip" or again["Content-Type"].startswith("application/")


def test_an_upload_without_a_valid_token_is_refused(live_server):
    import httpx

    refused = httpx.post(
        f"{live_server.url}/forensics/upload/",
        content=b"\x1f\x8b",
        headers={"Authorization": "Bearer forged"},
    )
    assert refused.status_code == 403


def test_a_failed_start_asks_every_node_for_its_part(failed_deployment, settings):
    from panel.core.domain.choices import DeploymentState, DesiredState
    from panel.deployments.models import Deployment
    from panel.deployments.rollouts.reconcile import on_operation_terminal
    from panel.forensics.models import DiagnosticsBundle
    from panel.nodes.models import Node
    from panel.operations.models import Operation

    settings.PANEL_URL = "http://panel.example:8000"
    Deployment.objects.filter(pk=failed_deployment.pk).update(
        observed_state=DeploymentState.STARTING, desired_state=DesiredState.RUNNING
    )
    launch = Operation.objects.create(
        kind="deploy", node=Node.objects.get(name=TEST_NODE), target="broken-one", status="failed",
        error="the engine exited during start-up", params={"deployment": failed_deployment.pk},
    )  # fmt: skip
    with transaction.atomic():
        on_operation_terminal(launch)
    bundle = DiagnosticsBundle.objects.get()
    assert (bundle.trigger, bundle.node_names) == ("failed_start", [TEST_NODE])
    (collect,) = Operation.objects.filter(kind="diagnostics")
    request = collect.task_kwargs["request"]
    assert request["upload_url"] == "http://panel.example:8000/forensics/upload/"
    assert request["env"] == {"TASK_QUEUE_ENABLE": "2"}


def test_the_api_names_an_unknown_deployment_on_its_field(bob):
    refused = api_client_for(bob).post("/api/v1/diagnostics/", {"deployment": "nowhere"}, format="json")
    assert refused.status_code == 400
    assert refused.json()["errors"] == {"deployment": ["No deployment named nowhere."]}
