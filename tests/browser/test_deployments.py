"""The deployment wizard and the deployment page in a real browser against a live panel: a tiny model made
on the simulated A2 host's disk and registered through the models API goes through the four wizard steps
to a running deployment (the sim stand-in engine), whose page shows the start-up log live, answers in the
playground token by token, and stops from its confirm dialog.

Screenshots: set PANEL_SCREENSHOTS=<dir> and each wizard step and the deployment page are saved there."""

import os
import re
from pathlib import Path

from playwright.sync_api import expect

from tests.browser.conftest import MODEL_NAME

SIM_NODE = "sim-a2"
DEPLOYMENT = "tiny-chat"
SCREENSHOTS = os.environ.get("PANEL_SCREENSHOTS")


def screenshot(page, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOTS) / f"deployments-{name}.png"), full_page=True)


def test_the_wizard_deploys_a_tiny_model_that_logs_answers_and_stops(staged_model, panel_page, live_panel):
    page = panel_page("bob")
    page.goto("/deployments/")
    page.get_by_test_id("new-deployment").click()

    # Step 1: the model, with its facts and where it is staged.
    expect(page.locator("[aria-current=step]")).to_contain_text("Model")
    row = page.locator("[data-testid=model-table] tr", has_text=MODEL_NAME)
    expect(row).to_contain_text(SIM_NODE)
    expect(row).to_contain_text("Qwen2ForCausalLM")
    row.locator("input[type=radio]").check()
    page.fill("#id_name", DEPLOYMENT)
    screenshot(page, "1-model")
    page.get_by_test_id("wizard-next").click()

    # Step 2: the planner's suggestion is pre-checked: TP 1 on one NUMA node.
    expect(page.get_by_test_id("suggestion")).to_contain_text("TP 1 on sim-a2: NPU 0")
    expect(page.locator("input[name=npus]:checked")).to_have_count(1)
    screenshot(page, "2-placement")
    page.get_by_test_id("wizard-next").click()

    # Step 3: defaults from the planner; changing a field re-plans without a reload (htmx).
    expect(page.locator("#id_tensor_parallel_size")).to_have_value("1")
    # The fields exist while the page still parses; htmx (a deferred script) listens only once it has run.
    page.wait_for_load_state()
    page.fill("#id_max_model_len", "1024")
    page.locator("#id_max_model_len").press("Tab")  # leaving the field fires "change": htmx re-plans
    expect(page.get_by_test_id("command").first).to_contain_text("--max-model-len 1024", timeout=30_000)
    expect(page.get_by_test_id("memory-plan")).to_be_visible()
    screenshot(page, "3-engine")
    page.get_by_test_id("wizard-next").click()

    # Step 4: the review shows the memory plan, the exact command and its environment.
    expect(page.get_by_test_id("review-name")).to_have_text(DEPLOYMENT)
    expect(page.get_by_test_id("command").first).to_contain_text("--max-model-len 1024")
    expect(page.locator(".mem-plan .mem-kv").first).to_be_visible()
    screenshot(page, "4-review")
    page.get_by_test_id("deploy").click()

    # The deployment page: live from here on, no reloads.
    page.wait_for_url(re.compile(rf"/deployments/{DEPLOYMENT}/$"))
    page.evaluate("window.__loadedOnce = true")
    expect(page.get_by_test_id("deployment-status")).to_have_text("Running", timeout=90_000)
    expect(page.locator("[data-field=log] .log-line").first).to_be_visible(timeout=15_000)
    expect(page.get_by_test_id("endpoint")).to_contain_text("/v1")

    page.get_by_test_id("chat-input").fill("Say hello")
    page.get_by_test_id("chat-send").click()
    answer = page.locator(".chat-msg.is-assistant").last
    expect(answer).not_to_have_class(re.compile(r"is-streaming"), timeout=30_000)
    expect(answer).not_to_have_class(re.compile(r"is-error"))
    assert answer.text_content().strip(), "the playground showed an empty answer"
    expect(page.locator("[data-field=chat-stats]")).to_contain_text("TTFT")
    expect(page.locator("[data-metric=running]")).not_to_have_text("—", timeout=20_000)
    # The charts fill from engine.metrics messages, one point per scrape.
    page.wait_for_function(
        "Number(document.getElementById('deployment').dataset.metricPoints) >= 3", timeout=30_000
    )
    npu_row = page.locator("[data-testid=deployment-npus] tbody tr").first
    expect(npu_row.locator("[data-live=aicore]")).not_to_have_text("—", timeout=10_000)
    screenshot(page, "5-deployment")

    # A short benchmark: its operation page follows it, the comparison page draws it.
    for level in ("16", "64"):
        page.locator(f"[data-testid=benchmark] input[name=concurrency][value='{level}']").uncheck()
    page.fill("[data-testid=benchmark] input[name=prompt_len]", "16")
    page.fill("[data-testid=benchmark] input[name=output_len]", "16")
    page.fill("[data-testid=benchmark] input[name=requests]", "4")
    page.get_by_test_id("run-benchmark").click()
    page.wait_for_url(re.compile(r"/operations/[0-9a-f-]{36}/$"))
    expect(page.locator("#operation")).to_have_attribute("data-status", "succeeded", timeout=60_000)
    page.goto(f"/deployments/benchmarks/?deployment={DEPLOYMENT}")
    expect(page.get_by_test_id("benchmark-table").locator("tbody tr")).to_have_count(2)
    expect(page.locator("[data-bench-chart=output_tokens_per_s] .uplot")).to_be_visible()
    screenshot(page, "7-benchmarks")
    page.goto(f"/deployments/{DEPLOYMENT}/")

    page.get_by_test_id("action-stop").click()
    expect(page.locator("dialog[open]")).to_contain_text(f"Stop {DEPLOYMENT}?")
    page.get_by_test_id("confirm-ok").click()
    expect(page.get_by_test_id("deployment-status")).to_have_text("Stopped", timeout=60_000)
    screenshot(page, "6-stopped")


def test_a_viewer_sees_the_deployments_but_no_wizard_or_actions(staged_model, panel_page):
    page = panel_page("charlie")
    page.goto("/deployments/")
    expect(page.get_by_test_id("deployment-table")).to_be_visible()
    expect(page.get_by_test_id("new-deployment")).to_have_count(0)
    response = page.goto("/deployments/new/model/")
    assert response.status == 403
