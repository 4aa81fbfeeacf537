"""NPU health on the node page in a real browser, in English and 简体中文: a sim chip goes Critical, the
agent's sample fails it by the policy, the page shows it failed with why and in the node's history; an admin
marks it healthy from its row with a note and sees it back in service, by them; a viewer gets no form."""

import re
import time

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.timeout(240)
SIM_NODE = "sim-a2"
LABELS = {
    "en": {"failed": "Failed", "ok": "In service", "set": "Set"},
    "zh-hans": {"failed": "故障", "ok": "正常服务", "set": "设置"},
}


@pytest.fixture(scope="module")
def inventoried(live_panel):
    """The sim node after one inventory, so its NPU rows exist."""
    live_panel.wait_for_node_online(SIM_NODE)
    node = live_panel.node(SIM_NODE)
    if len(node["npus"]) == 8:
        return node
    with live_panel.api("bob") as client:
        operation = client.post(f"/api/v1/nodes/{node['id']}/inventory/").raise_for_status().json()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            state = client.get(f"/api/v1/operations/{operation['id']}/").raise_for_status().json()
            if state["status"] in ("succeeded", "failed", "cancelled"):
                break
            time.sleep(0.25)
    assert state["status"] == "succeeded", f"inventory of {SIM_NODE}: {state['status']} {state.get('error')}"
    return live_panel.node(SIM_NODE)


def npu_state(live_panel, npu_id: int) -> str:
    npus = live_panel.node(SIM_NODE)["npus"]
    return next(npu["health_state"] for npu in npus if npu["npu_id"] == npu_id)


@pytest.mark.parametrize(("locale", "npu_id"), [("en", 3), ("zh-hans", 4)])
def test_a_critical_npu_is_failed_on_the_page_and_an_admin_marks_it_healthy(
    live_panel, inventoried, panel_page, locale, npu_id
):
    root = str(live_panel.sim_root(SIM_NODE))
    labels = LABELS[locale]
    page = panel_page(user="alice", locale=locale)
    page.goto(f"/nodes/{SIM_NODE}/")
    row = page.locator(f'tr[data-npu="{npu_id}/0"]')
    state = row.locator("[data-field=health-state]")
    expect(state.locator(".status")).to_have_text(labels["ok"])
    # Subscribed: the node's metrics frames arrive.
    expect(page.locator("[data-live=sampled]")).to_have_attribute(
        "data-seq", re.compile(r"."), timeout=30_000
    )
    live_panel.sim("fault", "--root", root, "--npu", str(npu_id), "--health", "Critical")
    try:
        # The row follows the node's npu_health frame: no reload.
        expect(state.locator(".status")).to_have_text(labels["failed"], timeout=60_000)
        assert npu_state(live_panel, npu_id) == "failed"
    finally:
        live_panel.sim("fault", "--root", root, "--clear")

    page.reload()
    expect(state.locator("[data-field=health-reason]")).to_contain_text("Critical")
    history = page.get_by_test_id("npu-health-history").locator(f'tr[data-change="{npu_id}/0"]').first
    expect(history).to_contain_text(labels["failed"])

    form = page.get_by_test_id(f"npu-health-override-{npu_id}-0")
    form.locator("select[name=state]").select_option("ok")
    form.locator("input[name=note]").fill("reseated the card")
    form.get_by_role("button", name=labels["set"]).click()
    expect(page).to_have_url(re.compile(rf"/nodes/{SIM_NODE}/$"))
    expect(row.locator("[data-field=health-state] .status")).to_have_text(labels["ok"])
    latest = page.get_by_test_id("npu-health-history").locator("tbody tr").first
    expect(latest).to_contain_text("reseated the card")
    expect(latest).to_contain_text("alice")
    assert npu_state(live_panel, npu_id) == "ok"


def test_a_viewer_sees_the_states_but_no_override(live_panel, inventoried, panel_page):
    page = panel_page(user="charlie")
    page.goto(f"/nodes/{SIM_NODE}/")
    expect(page.locator('tr[data-npu="0/0"] [data-field=health-state] .status')).to_be_visible()
    expect(page.locator("form[data-testid^=npu-health-override]")).to_have_count(0)
