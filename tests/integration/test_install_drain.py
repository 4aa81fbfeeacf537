"""An install that restarts the NPU driver or the host is refused while a deployment serves on the node,
through the API and the page alike, and names the deployments it would stop; draining the node (cordon,
stop its deployments through the real agent) lets the install start."""

import pytest

from tests.conftest import api_client_for
from tests.deployment_helpers import wait_for
from tests.integration.conftest import TEST_NODE

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]
NEW_DRIVER_PROFILE = "0.13.0"  # CANN 8.5.0 needs a newer driver than the sim A2's 24.1.rc2
SAME_DRIVER_PROFILE = "0.11.0"
NO_BROKER = pytest.mark.django_db  # rolled back, so on_commit never sends a task


@pytest.fixture
def serving_node(celery_worker, serving_rows):
    return serving_rows


@pytest.fixture
def serving_rows():
    """A node with a deployment serving on its NPU 0. Without the worker, tests use a plain transaction
    (NO_BROKER): nothing they start reaches the broker, where a later test's worker would find it."""
    from panel.catalog.models import Model
    from panel.deployments.models import Deployment
    from panel.nodes.models import Node

    node = Node.objects.create(
        name=TEST_NODE, transport="agent", versions={"driver": "24.1.rc2", "firmware": "7.5.0.3.220"}
    )
    deployment = Deployment.objects.create(
        name="qwen-on-npu0",
        model=Model.objects.create(name="Qwen3-8B"),
        observed_state="running",
        spec={"parts": [{"node": TEST_NODE, "npus": [0]}]},
    )
    deployment.nodes.add(node)
    return node, deployment


@NO_BROKER
def test_a_driver_install_is_refused_under_a_serving_deployment_and_while_it_stops(
    store,
    serving_rows,
    bob,
):
    node, deployment = serving_rows
    client = api_client_for(bob)
    url = f"/api/v1/node-stacks/{node.name}/install/"
    refused = client.post(url, {"profile": NEW_DRIVER_PROFILE}, format="json")
    assert refused.status_code == 400, refused.content
    message = refused.json()["errors"]["node"][0]
    assert "qwen-on-npu0 (Running)" in message
    assert "driver, firmware, reboot" in message
    assert "Drain" in message
    assert not node.operations.filter(kind="install").exists()

    drained = client.post(f"/api/v1/nodes/{node.pk}/drain/")
    assert drained.status_code == 200, drained.content
    assert drained.json()["cordoned"] is True
    deployment.refresh_from_db()
    assert deployment.desired_state == "stopped"
    assert deployment.observed_state == "stopping"  # no agent here: its stop has not run yet
    still = client.post(url, {"profile": NEW_DRIVER_PROFILE}, format="json")
    assert still.status_code == 400
    assert "qwen-on-npu0 (Stopping)" in still.json()["errors"]["node"][0]
    assert not node.operations.filter(kind="install").exists()


def test_once_drained_through_the_agent_the_install_starts(store, serving_node, live_server, bob):
    from panel.operations.models import Operation
    from panel.provisioning.services import cancel

    node, deployment = serving_node
    client = api_client_for(bob)
    assert client.post(f"/api/v1/nodes/{node.pk}/drain/").status_code == 200

    def stopped():
        deployment.refresh_from_db()
        return deployment.observed_state == "stopped"

    wait_for(stopped, 60, "the drained deployment to stop")
    started = client.post(
        f"/api/v1/node-stacks/{node.name}/install/", {"profile": NEW_DRIVER_PROFILE}, format="json"
    )
    assert started.status_code == 202, started.content
    cancel(Operation.objects.get(pk=started.json()["id"]))


@NO_BROKER
def test_an_install_that_keeps_the_driver_is_not_refused(store, serving_rows):
    from panel.provisioning.disruption import planned_restarts
    from panel.provisioning.services import _request

    node, _deployment = serving_rows
    assert planned_restarts(node, _request(SAME_DRIVER_PROFILE, "auto", False)) == []
    assert planned_restarts(node, _request(NEW_DRIVER_PROFILE, "auto", False)) == [
        "driver",
        "firmware",
        "reboot",
    ]


@NO_BROKER
def test_the_install_page_shows_the_refusal(store, serving_rows, bob):
    from django.test import Client

    node, _deployment = serving_rows
    browser = Client()
    browser.force_login(bob)
    warning = browser.get(f"/provisioning/nodes/{node.name}/").content.decode()
    assert 'data-testid="serving-warning"' in warning
    assert ">qwen-on-npu0</a> (Running)" in warning
    page = browser.post(
        f"/provisioning/nodes/{node.name}/install/",
        {"profile": NEW_DRIVER_PROFILE, "pip_source": "auto"},
        follow=True,
    )
    assert "qwen-on-npu0" in page.content.decode()
    assert not node.operations.filter(kind="install").exists()


@NO_BROKER
@pytest.mark.parametrize(
    ("failed_step", "refused"),
    [("driver", True), ("reboot", True), ("cann_toolkit", False)],
)
def test_a_resume_is_refused_only_if_its_remaining_steps_restart_the_driver_or_host(
    serving_rows, bob, failed_step, refused
):
    from django.core.exceptions import ValidationError

    from panel.provisioning.models import NodeStack
    from panel.provisioning.services import resume_install

    node, _deployment = serving_rows
    plan = [{"name": name} for name in ("driver", "firmware", "reboot", "cann_toolkit", "ops", "venv")]
    NodeStack.objects.create(
        node=node,
        status="failed",
        profile=NEW_DRIVER_PROFILE,
        install_request={"profile": NEW_DRIVER_PROFILE, "panel_url": "http://panel"},
        plan=plan,
        failed_step=failed_step,
    )
    if refused:
        with pytest.raises(ValidationError, match="qwen-on-npu0"):
            resume_install(node, user=bob, panel_url="http://panel")
    else:
        assert resume_install(node, user=bob, panel_url="http://panel").params["resume_from"] == failed_step


@NO_BROKER
def test_after_the_install_the_pages_offer_to_uncordon_and_start_what_the_drain_stopped(serving_rows, bob):
    from django.test import Client

    from panel.deployments.rollouts.node_actions import drain
    from panel.operations.models import Operation
    from panel.provisioning.models import NodeStack

    node, deployment = serving_rows
    assert [d.name for d in drain(node, user=bob)] == ["qwen-on-npu0"]
    node.refresh_from_db()
    assert (node.cordoned, node.drained) == (True, ["qwen-on-npu0"])
    # The drain's stop went through before the install ran; the row gets the launch a plan would give it.
    Operation.objects.filter(target=deployment.name).update(status="succeeded")
    launch = {"node": TEST_NODE, "npus": [0], "role": "head", "launch": {}}
    deployment.__class__.objects.filter(pk=deployment.pk).update(
        observed_state="stopped", spec={"parts": [launch]}
    )
    install = Operation.objects.create(kind="install", node=node, status="succeeded", progress=100)
    NodeStack.objects.create(node=node, status="installed", install_operation=install)

    client = Client()
    client.force_login(bob)
    for page in (f"/provisioning/nodes/{node.name}/", f"/operations/{install.pk}/"):
        html = client.get(page).content.decode()
        assert 'data-testid="after-install"' in html, page
        assert "the deployments its drain stopped are stopped: qwen-on-npu0" in html
        assert "Uncordon and start them" in html

    done = client.post(
        f"/deployments/nodes/{node.name}/resume/", {"next": f"/provisioning/nodes/{node.name}/"}, follow=True
    )
    assert f"{node.name} is uncordoned; starting again: qwen-on-npu0." in done.content.decode()
    node.refresh_from_db()
    deployment.refresh_from_db()
    assert (node.cordoned, node.drained, deployment.desired_state) == (False, [], "running")
    assert deployment.observed_state == "starting"
    assert 'data-testid="after-install"' not in client.get(f"/operations/{install.pk}/").content.decode()
