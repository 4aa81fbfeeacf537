"""The nodes pages in a real browser: an admin adds an agent node and sees the one-line join command; an
inventory started from the node page ends with the NPUs shown, logic ids and NUMA nodes included, their link
matrix, and figures that follow the node's metrics frames."""

import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.timeout(180)


def test_an_admin_adds_an_agent_node_and_sees_the_join_command(live_panel, panel_page):
    page = panel_page(user="alice")
    page.goto(f"{live_panel.url}/nodes/")
    page.get_by_test_id("add-node").click()
    page.locator("input[name=transport][value=agent]").check()
    expect(page.locator("input[name=address]")).to_be_hidden()  # SSH fields only for SSH nodes
    page.locator("input[name=name]").fill("npu-new-01")
    page.get_by_test_id("add-node-submit").click()
    command = page.get_by_test_id("join-command")
    script = "/tmp/ascend-panel-install.sh"
    expect(command).to_contain_text(f"curl -fsSL {live_panel.url}/nodes/agent/install.sh -o {script}")
    piped_token = re.compile(r"sha256sum -c --quiet - && printf '%s\\n' apj_\S+ \| sudo bash ")
    expect(command).to_contain_text(piped_token)
    expect(command).to_contain_text(re.compile(r"--node npu-new-01 --package-sha256 [0-9a-f]{64}$"))
    page.goto(f"{live_panel.url}/nodes/")
    expect(page.get_by_test_id("waiting-agents")).to_contain_text("npu-new-01")


def test_inventory_from_the_node_page_shows_npus_with_logic_ids_and_numa_nodes(live_panel, panel_page):
    live_panel.wait_for_node_online("sim-a2")
    page = panel_page(user="bob")
    page.goto(f"{live_panel.url}/nodes/sim-a2/")
    page.get_by_test_id("run-inventory").click()
    expect(page).to_have_url(re.compile(r"/operations/[0-9a-f-]+/"))
    expect(page.locator("#operation")).to_have_attribute("data-status", "succeeded", timeout=90_000)
    page.goto(f"{live_panel.url}/nodes/sim-a2/")
    rows = page.get_by_test_id("npu-table").locator("tbody tr")
    expect(rows).to_have_count(8)
    logic_ids = rows.locator("[data-field=logic-id]").all_inner_texts()
    assert sorted(int(text) for text in logic_ids) == list(range(8))
    numa = {int(text) for text in rows.locator("[data-field=numa-node]").all_inner_texts()}
    assert numa <= {0, 1, 2, 3}
    assert len(numa) > 1
    expect(page.get_by_test_id("npu-smi-info")).to_contain_text("npu-smi")
    expect(page.get_by_test_id("numa-nodes")).to_contain_text("0-31")
    topology = page.get_by_test_id("npu-topology")
    expect(topology.locator("tr[data-device=NPU0] td.link")).to_have_text(["X"] + ["HCCS"] * 7)
    # Each row follows the node's metrics frames: figures replace the dashes, and the next frame is shown.
    expect(rows.first.locator("[data-live=aicore]")).to_have_text(re.compile(r"\d+\s?%"), timeout=30_000)
    expect(rows.first.locator("[data-live=temp]")).to_have_text(re.compile(r"\d+\s?°C"))
    sampled = page.locator("[data-live=sampled]")
    first_seq = sampled.get_attribute("data-seq")
    expect(sampled).not_to_have_attribute("data-seq", first_seq or "", timeout=30_000)


def test_the_add_form_shows_and_sends_ssh_fields_only_for_ssh_nodes(live_panel, panel_page):
    page = panel_page(user="alice")
    page.goto(f"{live_panel.url}/nodes/add/")
    address = page.locator("input[name=address]")
    expect(address).to_be_hidden()
    expect(address).to_be_disabled()  # hidden fields are not sent
    page.locator("input[name=transport][value=ssh]").check()
    expect(address).to_be_visible()
    expect(address).to_be_enabled()
    expect(page.locator("textarea[name=client_key]")).to_be_visible()
    # Styled like the other forms: the fieldset draws no browser-default frame.
    border = page.locator("fieldset.field").evaluate("e => getComputedStyle(e).borderTopStyle")
    assert border == "none"
    page.locator("input[name=transport][value=agent]").check()
    expect(address).to_be_hidden()


def test_drain_asks_first_then_cordons_the_node_and_says_what_it_stopped(live_panel, panel_page):
    live_panel.wait_for_node_online("sim-a2")
    page = panel_page(user="bob")
    page.goto(f"{live_panel.url}/nodes/sim-a2/")
    try:
        page.get_by_test_id("drain").click()
        dialog = page.get_by_test_id("confirm-dialog")
        expect(dialog).to_contain_text("Drain sim-a2?")
        dialog.get_by_test_id("confirm-cancel").click()
        expect(dialog).to_be_hidden()
        expect(page.get_by_test_id("cordoned")).to_have_count(0)  # cancelled: nothing was sent
        page.get_by_test_id("drain").click()
        dialog.get_by_test_id("confirm-ok").click()
        expect(page.get_by_test_id("cordoned")).to_be_visible()
        expect(page.locator(".messages")).to_contain_text(
            re.compile(r"sim-a2 is cordoned(; no deployment runs on it| and these deployments are stopping)")
        )
    finally:
        with live_panel.api("bob") as client:  # the other browser tests deploy there
            client.post(f"/api/v1/nodes/{live_panel.node('sim-a2')['id']}/uncordon/").raise_for_status()
