"""A node's provisioning page in a real browser: preflight checklist, then an install of simulated packages
from the package store followed live to 100%."""

import re

from playwright.sync_api import expect


def test_preflight_then_install_from_the_node_page_reach_100_percent(live_panel, panel_page):
    live_panel.manage("seed_sim_packages")
    page = panel_page("bob")
    page.goto("/nodes/sim-a2/")
    page.get_by_test_id("provisioning-link").click()
    page.wait_for_url(re.compile(r"/provisioning/nodes/sim-a2/$"))
    page.select_option("#id_profile", "0.11.0")

    page.get_by_test_id("run-preflight").click()
    page.wait_for_url(re.compile(r"\?operation="))
    # An install waits for its preflight's checklist: wait for this preflight's end, not for any checklist
    # (an earlier preflight's shows until the page reloads with this one's).
    expect(page.locator("[data-testid=preflight][data-status=succeeded]")).to_be_visible(timeout=180_000)
    checklist = page.get_by_test_id("checklist")
    expect(checklist.locator("tr[data-check=npus][data-result=pass]")).to_be_visible()

    # The page keeps the checked profile selected: Install installs what the preflight checked.
    expect(page.locator("#id_profile")).to_have_value("0.11.0")
    page.get_by_test_id("run-install").click()
    dialog = page.get_by_test_id("confirm-dialog")  # an install changes the host: it asks first
    expect(dialog).to_contain_text("Install the chosen stack on sim-a2?")
    dialog.get_by_test_id("confirm-ok").click()
    page.wait_for_url(re.compile(r"\?operation="))
    steps = page.get_by_test_id("steps")
    # Rows come from the live plan event; states change as the steps run.
    expect(steps.locator("tr[data-step=cann_toolkit]")).to_be_visible(timeout=30_000)
    expect(page.get_by_test_id("install-progress")).to_have_text("100", timeout=120_000)
    expect(page.get_by_test_id("stack-status")).to_have_class(re.compile(r"\bstatus-ok\b"), timeout=30_000)
    expect(steps.locator("tr[data-step=verify_npu][data-state=done]")).to_be_visible()


def test_the_preflight_plan_reads_in_chinese(live_panel, panel_page):
    live_panel.manage("seed_sim_packages")
    page = panel_page("bob", locale="zh-hans")
    page.goto("/provisioning/nodes/sim-a2/")
    page.select_option("#id_profile", "0.13.0")  # needs a newer driver: driver, firmware, reboot steps
    page.get_by_test_id("run-preflight").click()
    # The checklist of an earlier preflight (0.11.0, no driver step) shows until the page reloads with
    # this one's: wait for this one's plan, not for any checklist.
    plan = page.locator("p.muted", has_text="安装将执行")
    expect(plan).to_contain_text(re.compile(r"安装 NPU 驱动 \S+"), timeout=60_000)
    expect(plan).to_contain_text("安装 vLLM")
    assert "Install the NPU driver" not in plan.inner_text()
