"""The dashboard in a real browser against a live panel: NPU cards from a simulated A2 host update every
second without reload, a health fault turns a card red and raises an alert, the page reads in Chinese,
an NPU opens its uPlot charts, and 64 nodes × 8 NPUs stay fluent: 50 nodes a page, the socket subscribed
to the fleet summary and the nodes on the page only, filters that work across pages.

Screenshots: set PANEL_SCREENSHOTS=<dir> and the 64-node test saves light and dark full pages there."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import REPO
from tests.browser.fake_fleet import NPUS_PER_NODE, node_names

COMPILED_CATALOG = REPO / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.mo"
SIM_NODE = "sim-a2"
FLEET_SIZE = 64
NODES_PER_PAGE = 50


def card(page, node, npu, chip=0):
    return page.locator(f'.node-section[data-node="{node}"] .npu-card[data-npu="{npu}"][data-chip="{chip}"]')


def card_texts(page, node):
    return page.eval_on_selector_all(
        f'.node-section[data-node="{node}"] .npu-card', "cards => cards.map(c => c.textContent).join('|')"
    )


@pytest.fixture(scope="module")
def inventoried(live_panel):
    """The sim node after one inventory, so its NPU rows exist and the page renders them server-side."""
    node = live_panel.node(SIM_NODE)
    with live_panel.api("bob") as client:
        operation = client.post(f"/api/v1/nodes/{node['id']}/inventory/").raise_for_status().json()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = client.get(f"/api/v1/operations/{operation['id']}/").raise_for_status().json()
            if state["status"] in ("succeeded", "failed", "cancelled"):
                break
            time.sleep(0.25)
    assert state["status"] == "succeeded", f"inventory of {SIM_NODE}: {state['status']} {state.get('error')}"
    return node


def test_dashboard_renders_the_inventory_and_updates_values_live(inventoried, panel_page):
    page = panel_page("charlie")
    first_paint = page.eval_on_selector_all(
        f'.node-section[data-node="{SIM_NODE}"] .npu-card', "cards => cards.length"
    )
    assert first_paint == 8, "the server should render the 8 NPUs of the last inventory before any frame"
    expect(card(page, SIM_NODE, 0).locator("[data-f=power]")).to_have_text(re.compile(r"\d+ W"))
    page.evaluate("window.__notReloaded = true")

    before = card_texts(page, SIM_NODE)
    page.wait_for_function(
        """([node, before]) => [...document.querySelectorAll(`.node-section[data-node="${node}"] .npu-card`)]
             .map(c => c.textContent).join('|') !== before""",
        arg=[SIM_NODE, before],
        timeout=10_000,
    )
    assert page.evaluate("window.__notReloaded") is True, "the values changed by reloading the page"
    expect(page.locator('.fleet-table tr[data-node="sim-a2"] [data-f=status]')).to_have_class(
        re.compile(r"\bstatus-ok\b")
    )
    expect(page.locator(".fleet-stats [data-f=online]")).to_have_text("1")


def test_npu_health_fault_turns_its_card_red_and_raises_an_alert(inventoried, panel_page, live_panel):
    page = panel_page("alice")
    npu3 = card(page, SIM_NODE, 3)
    root = live_panel.sim_root(SIM_NODE)
    expect(npu3).to_have_class(re.compile(r"\bstatus-ok\b"))
    try:
        live_panel.sim("fault", "--root", str(root), "--npu", "3", "--health", "Alarm")
        expect(npu3).to_have_class(re.compile(r"\bstatus-alarm\b"), timeout=3_000)
        expect(npu3.locator("[data-f=health]")).to_have_text("Alarm")
        expect(card(page, SIM_NODE, 2)).to_have_class(re.compile(r"\bstatus-ok\b"))
        expect(page.locator("[data-alert-banner]")).to_be_visible(timeout=3_000)
        expect(page.locator(".fleet-stats [data-f=alerts]")).not_to_have_text(re.compile(r"^(0|—)$"))
        expect(page.locator('.fleet-table tr[data-node="sim-a2"] [data-f=alerts]')).to_have_text("1")
    finally:
        live_panel.sim("fault", "--root", str(root), "--clear")
    expect(npu3).to_have_class(re.compile(r"\bstatus-ok\b"), timeout=5_000)
    live_panel.mark_npus_healthy(SIM_NODE)  # the policy failed it: it stays out until an admin says so


def test_dashboard_switches_to_chinese(inventoried, panel_page):
    page = panel_page("charlie")
    page.select_option(".lang-switch select", "zh-hans")
    page.wait_for_load_state()
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    expect(card(page, SIM_NODE, 0).locator("[data-f=power]")).to_have_text(re.compile(r"\d+ W"))
    if not COMPILED_CATALOG.exists():
        pytest.skip(f"{COMPILED_CATALOG} is not compiled yet; only the language switch was checked")
    expect(page.locator('.stat[data-stat="util"] .stat-label')).to_have_text("AI Core 平均利用率")
    expect(page.locator(".dashboard-bar [data-f=connection]")).to_have_text("实时", timeout=5_000)


def test_npu_card_opens_a_drawer_with_live_and_history_charts(inventoried, panel_page):
    page = panel_page("charlie")
    card(page, SIM_NODE, 5).click()
    drawer = page.get_by_test_id("npu-drawer")
    expect(drawer).to_be_visible()
    expect(drawer.locator("[data-f=title]")).to_contain_text("sim-a2")
    expect(drawer.locator(".chart .uplot canvas")).to_have_count(4)
    expect(page).to_have_url(re.compile(r"#npu=sim-a2/5/0$"))  # the open NPU is a link one can share

    points = drawer.locator('.chart[data-metric="power"]')
    expect(points).to_be_visible()
    drawer.locator('[data-range="1h"]').click()
    expect(drawer.locator('[data-range="1h"]')).to_have_attribute("aria-pressed", "true")
    expect(drawer.locator(".chart .uplot canvas")).to_have_count(4)
    expect(drawer.locator("[data-f=message]")).to_be_hidden()

    page.keyboard.press("Escape")
    expect(drawer).to_be_hidden()
    expect(page).not_to_have_url(re.compile("#npu="))


def test_dashboard_reconnects_after_a_network_drop_and_back_fills_the_gap(inventoried, panel_page):
    page = panel_page("charlie")
    network = {"down": False, "sockets": []}

    def through_the_network(socket):
        if network["down"]:
            socket.close()
            return
        socket.connect_to_server()
        network["sockets"].append(socket)

    page.route_web_socket(re.compile(r"/ws/$"), through_the_network)
    page.reload()
    connection = page.locator(".dashboard-bar [data-f=connection]")
    expect(connection).to_have_class(re.compile(r"\bstatus-ok\b"))

    network["down"] = True
    for socket in network["sockets"]:
        socket.close()
    expect(connection).to_have_class(re.compile(r"\bstatus-offline\b"), timeout=10_000)
    with page.expect_request(lambda r: "/metrics/?since=60s" in r.url, timeout=30_000):
        network["down"] = False
    expect(connection).to_have_class(re.compile(r"\bstatus-ok\b"))
    before = card_texts(page, SIM_NODE)
    page.wait_for_function(
        """([node, before]) => [...document.querySelectorAll(`.node-section[data-node="${node}"] .npu-card`)]
             .map(c => c.textContent).join('|') !== before""",
        arg=[SIM_NODE, before],
        timeout=10_000,
    )


@pytest.fixture(scope="module")
def big_fleet(live_panel):
    names = node_names(FLEET_SIZE)
    live_panel.manage("ensure_demo_nodes", *names)
    keys = live_panel.data_dir / "fleet-keys"
    live_panel.manage("agent_credential", "--dir", str(keys), *names)
    fleet = ["--nodes", str(FLEET_SIZE), "--seconds", "600", "--keys", str(keys)]
    driver = live_panel.start("fake-fleet", [sys.executable, "-m", "tests.browser.fake_fleet", *fleet])
    deadline = time.monotonic() + 60
    while live_panel.node(names[-1])["status"] != "online":
        log = live_panel.log_tail("fake-fleet")
        assert time.monotonic() < deadline, f"{names[-1]} never came online; fake-fleet log:\n{log}"
        live_panel.check_children()
        time.sleep(0.5)
    yield names
    driver.terminate()
    try:
        driver.wait(10)
    except subprocess.TimeoutExpired:
        driver.kill()
    # The live panel is the whole session's: later modules meet its two sim hosts on the dashboard's first
    # page, not behind 64 fake nodes that sort before them.
    with live_panel.api() as api:
        for name in names:
            found = api.get("/api/v1/nodes/", params={"name": name}).raise_for_status().json()["results"]
            for node in (n for n in found if n["name"] == name):
                api.delete(f"/api/v1/nodes/{node['id']}/", params={"force": "true"}).raise_for_status()


def main_thread_metrics(cdp) -> dict:
    return {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}


def watch_subscriptions(page) -> list[list[str]]:
    """The group lists the page's sockets send, in order, from now on."""
    sent: list[list[str]] = []

    def on_socket(socket):
        def on_frame(payload):
            message = json.loads(payload) if isinstance(payload, str) else {}
            if message.get("type") == "subscribe":
                sent.append(sorted(message["groups"]))

        socket.on("framesent", on_frame)

    page.on("websocket", on_socket)
    return sent


def test_dashboard_stays_fluent_with_64_nodes_of_8_npus(big_fleet, panel_page):
    page = panel_page("alice", viewport={"width": 1600, "height": 1000})
    sent = watch_subscriptions(page)
    page.reload()
    first_page = big_fleet[:NODES_PER_PAGE]
    expected_cards = NODES_PER_PAGE * NPUS_PER_NODE
    page.wait_for_function(f"document.querySelectorAll('#npu-nodes .npu-card').length >= {expected_cards}")
    page.wait_for_timeout(3000)  # let the first back-fill settle before measuring steady state
    # What the page shows and nothing more: the fleet summary, the 50 nodes on this page (and the alert
    # banner every page has).
    assert sent, "the page sent no subscription"
    assert sent[-1] == sorted(["alerts", "fleet", *(f"node.{name}" for name in first_page)])

    last = first_page[-1]
    before = card_texts(page, last)
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")
    start = main_thread_metrics(cdp)
    page.wait_for_timeout(5000)
    end = main_thread_metrics(cdp)
    assert card_texts(page, last) != before, "the last node's cards stopped updating"
    # Counts carry the verdict, not durations, which depend on how loaded the test machine is. Frames are
    # applied in batches, so the page lays out a few times a second, not once per frame of each node.
    layouts = end["LayoutCount"] - start["LayoutCount"]
    assert layouts <= 25, f"{layouts} layouts in 5 s: live updates lay out the page once per frame"
    # The figures at the top count the whole fleet, not the page.
    expect(page.locator(".fleet-stats [data-f=online]")).to_have_text(str(FLEET_SIZE + 1))

    sections = page.locator(".node-section:visible")
    expect(sections).to_have_count(NODES_PER_PAGE)
    search = page.get_by_role("searchbox")
    search.fill("fleet-07")  # typing narrows this page at once
    expect(sections).to_have_count(1)
    search.fill("fleet-6")
    expect(sections).to_have_count(0)  # fleet-60 … fleet-64 are on the next page
    with page.expect_navigation():
        search.press("Enter")  # Enter searches every page
    expect(page).to_have_url(re.compile(r"[?&]name=fleet-6(&|$)"))
    expect(sections).to_have_count(5)
    search = page.get_by_role("searchbox")
    search.fill("")
    with page.expect_navigation():
        search.press("Enter")

    with page.expect_navigation():
        page.get_by_label("Only nodes that need attention").check()
    expect(page).to_have_url(re.compile(r"[?&]attention=true"))
    page.wait_for_timeout(3000)  # live frames colour the cards
    unhealthy = ":has(.npu-card.status-alarm, .npu-card.status-warning)"
    shown_unhealthy = page.locator(f".node-section:visible{unhealthy}")
    expect(shown_unhealthy).to_have_count(page.locator(f".node-section{unhealthy}").count())
    # Nodes with no data yet also "need attention", so on a slow machine more than the unhealthy ones show.
    assert 0 < shown_unhealthy.count() <= sections.count()
    with page.expect_navigation():
        page.get_by_label("Only nodes that need attention").uncheck()
    expect(sections).to_have_count(NODES_PER_PAGE)

    pager = page.get_by_test_id("pager").first
    expect(pager.locator("[data-f=range]")).to_contain_text(f"1–{NODES_PER_PAGE} of {FLEET_SIZE + 1}")
    with page.expect_navigation():
        pager.get_by_role("link", name="Next").click()
    second_page = [*big_fleet[NODES_PER_PAGE:], SIM_NODE]
    expect(page.locator(".node-section")).to_have_count(len(second_page))
    wanted = sorted(["alerts", "fleet", *(f"node.{name}" for name in second_page)])
    deadline = time.monotonic() + 15
    while sent[-1] != wanted and time.monotonic() < deadline:
        page.wait_for_timeout(200)
    assert sent[-1] == wanted
    expect(card(page, big_fleet[-1], 0).locator("[data-f=util]")).not_to_have_text("—")

    shots = os.environ.get("PANEL_SCREENSHOTS")
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        for theme in ("light", "dark"):
            page.evaluate(f"localStorage.setItem('panel-theme', '{theme}')")
            page.reload()
            page.wait_for_timeout(4000)
            page.screenshot(path=f"{shots}/dashboard-{theme}.png")
            page.screenshot(path=f"{shots}/dashboard-{theme}-full.png", full_page=True)
