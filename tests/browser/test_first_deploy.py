"""What a new admin does first: deploy the model the panel ships (tiny-chat, generated on the sim hosts with
no hub) through the wizard, without registering or downloading anything."""

import re
import time

import pytest
from playwright.sync_api import expect

MODEL = "tiny-chat"
NAME = "first-deploy"


@pytest.fixture
def deleted_afterwards(live_panel):
    """The deployment goes at the end, so its NPU is free for the tests that pick NPUs themselves."""
    yield
    with live_panel.api("alice") as client:
        listed = client.get("/api/v1/deployments/").json()["results"]
        for deployment in (d for d in listed if d["name"] == NAME):
            url = f"/api/v1/deployments/{deployment['id']}/"
            client.delete(url)
            deadline = time.monotonic() + 60
            while client.get(url).status_code != 404 and time.monotonic() < deadline:
                time.sleep(0.5)


@pytest.mark.usefixtures("deleted_afterwards")
def test_a_new_admin_deploys_the_shipped_model_without_registering_anything(live_panel, panel_page):
    live_panel.wait_for_node_online("sim-a2")
    page = panel_page("alice")
    page.goto("/deployments/")
    page.get_by_test_id("new-deployment").click()

    row = page.locator("[data-testid=model-table] tr", has_text=MODEL)
    for _attempt in range(60):  # the agent inspects the copy once it runs; the wizard lists inspected copies
        if row.count():
            break
        page.wait_for_timeout(1000)
        page.reload()
    expect(row).to_contain_text("sim-a2")
    expect(row).to_contain_text("LlamaForCausalLM")
    expect(page.locator("[data-testid=model-table]")).not_to_contain_text(".onnx")
    row.locator("input[type=radio]").check()
    page.fill("#id_name", "first-deploy")
    page.get_by_test_id("wizard-next").click()
    expect(page.locator("input[name=npus]:checked")).to_have_count(1)
    page.get_by_test_id("wizard-next").click()
    expect(page.locator("#id_tensor_parallel_size")).to_have_value("1")
    page.get_by_test_id("wizard-next").click()
    expect(page.get_by_test_id("review-name")).to_have_text("first-deploy")
    page.get_by_test_id("deploy").click()

    page.wait_for_url(re.compile(r"/deployments/first-deploy/$"))
    expect(page.get_by_test_id("deployment-status")).to_have_text("Running", timeout=90_000)
    page.get_by_test_id("chat-input").fill("Hello")
    page.get_by_test_id("chat-send").click()
    answer = page.locator(".chat-msg.is-assistant").last
    expect(answer).not_to_have_class(re.compile(r"is-streaming"), timeout=30_000)
    expect(answer).not_to_have_class(re.compile(r"is-error"))

    page.get_by_test_id("action-stop").click()
    page.get_by_test_id("confirm-ok").click()
    # A stop is a reconcile tick, the agent asking whether the delivery is still wanted (up to 10 s for
    # the answer on a busy panel worker) and SIGTERM with 10 s of grace: 30 s was once too short in CI.
    expect(page.get_by_test_id("deployment-status")).to_have_text("Stopped", timeout=60_000)
