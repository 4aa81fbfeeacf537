"""A deployment's History tab in a real browser, in English and Chinese: every applied spec is a numbered
revision with who, the change and its outcome, and "Roll back to this" goes back to one (a new revision).
Roll back of a serving deployment with room for a surge keeps it serving: no downtime box, a surge replica
serves before the only one restarts. And the Edit page's downtime confirmation: a change of a serving
deployment that has no room for a surge replica says it stops serving for about N s, is refused until its
box is ticked, then applies."""

import re
import threading
import time

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import MODEL_NAME, MODEL_PATH, SIM_NODES, delete_deployments, wait_until

NODE = SIM_NODES[0][0]


def spec(npus=1, state="stopped", max_model_len=1024) -> dict:
    return {
        "model": MODEL_NAME,
        "path": MODEL_PATH,
        "placement": {"node": NODE, "npus": npus},
        "engine": {"max_model_len": max_model_len},
        "state": state,
    }


@pytest.fixture
def deployments(staged_model, live_panel):
    """`deployments(name, spec)`: applied by bob through the API, deleted afterwards."""
    made = []

    def make(name: str, body: dict) -> str:
        with live_panel.api("bob") as api:
            answer = api.put(f"/api/v1/deployments/{name}/", json=body)
            assert answer.status_code in (201, 202), answer.text
        made.append(name)
        return name

    yield make
    delete_deployments(live_panel, made)


def _max_model_len(live_panel, name: str) -> int:
    with live_panel.api("alice") as api:
        return api.get(f"/api/v1/deployments/{name}/?format=spec").json()["engine"]["max_model_len"]


@pytest.mark.parametrize(
    ("locale", "words"),
    [
        ("en", {"tab": "History", "outcome": "Outcome", "created": "Created", "back": "Rolled back"}),
        ("zh-hans", {"tab": "历史", "outcome": "结果", "created": "已创建", "back": "已回滚"}),
    ],
)
def test_the_history_tab_lists_revisions_and_rolls_back_to_one(
    deployments, panel_page, live_panel, locale, words
):
    name = deployments(f"history-{locale}", spec())
    deployments(name, spec(max_model_len=2048))  # revision 2
    page = panel_page("bob", locale)
    page.goto(f"/deployments/{name}/")
    page.get_by_test_id("deployment-tabs").get_by_role("link", name=words["tab"]).click()
    page.wait_for_url(re.compile(rf"/deployments/{name}/history/$"))
    table = page.get_by_test_id("revisions")
    expect(table.locator("thead")).to_contain_text(words["outcome"])
    expect(table.locator("tbody tr")).to_have_count(2)
    expect(table.locator('tr[data-revision="1"]')).to_contain_text(words["created"])
    expect(table.locator('tr[data-revision="2"]')).to_contain_text("engine.max_model_len")
    expect(table.locator('tr[data-revision="2"]')).to_contain_text("bob")

    page.get_by_test_id("rollback-to-1").click()
    page.wait_for_url(re.compile(rf"/deployments/{name}/rollback/\?to_revision=1$"))
    expect(page.locator('tr[data-change="engine.max_model_len"]')).to_contain_text("2048")
    page.get_by_test_id("rollback-apply").click()
    page.wait_for_url(re.compile(rf"/deployments/{name}/$"))
    assert _max_model_len(live_panel, name) == 1024
    page.goto(f"/deployments/{name}/history/")
    expect(page.get_by_test_id("revisions").locator('tr[data-revision="3"]')).to_contain_text(words["back"])


class ServingWatch(threading.Thread):
    """Reads the deployment through the API every 0.2 s: how often no row of it ran, and whether one other
    than the primary (the surge) ran at some point."""

    def __init__(self, live_panel, name: str):
        super().__init__(daemon=True)
        self.live_panel, self.name = live_panel, name
        self.reads, self.surge_served = 0, False
        self.not_serving: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        with self.live_panel.api("alice") as api:
            while not self.stopping.is_set():
                answer = api.get(f"/api/v1/deployments/{self.name}/").json()
                others = [r for r in answer["replicas"] if r["status"] == "running"]
                self.reads += 1
                self.surge_served = self.surge_served or bool(others)
                if answer["status"] != "running" and not others:
                    self.not_serving.append(answer["status"])
                time.sleep(0.2)


def _settled(live_panel, name: str) -> bool:
    with live_panel.api("alice") as api:
        answer = api.get(f"/api/v1/deployments/{name}/").json()
    rollout = answer["rollout"] or {}
    return answer["status"] == "running" and rollout.get("status") != "running" and not answer["replicas"]


def _runs_with(live_panel, name: str, max_model_len: int) -> bool:
    return _settled(live_panel, name) and _max_model_len(live_panel, name) == max_model_len


@pytest.mark.parametrize(
    ("locale", "words"),
    [("en", {"back": "Rolled back", "ok": "Succeeded"}), ("zh-hans", {"back": "已回滚", "ok": "成功"})],
)
def test_roll_back_of_a_serving_deployment_surges_and_never_stops_serving(
    deployments, panel_page, live_panel, locale, words
):
    """`rollout undo` once restarted the only replica in place ("No free NPUs for a surge replica" with 7
    free): going back is a rolling update like any change, the old replica serving until the surge does."""
    assert _free_npus(live_panel) >= 2, "this test needs room for a surge replica"
    name = deployments(f"undo-{locale}", spec(state="running"))
    wait_until(lambda: _settled(live_panel, name), 120, f"{name} runs")
    deployments(name, spec(state="running", max_model_len=2048))
    wait_until(lambda: _runs_with(live_panel, name, 2048), 180, f"{name} takes 2048")

    page = panel_page("bob", locale)
    page.goto(f"/deployments/{name}/")
    page.get_by_test_id("action-rollback").click()
    page.wait_for_url(re.compile(rf"/deployments/{name}/rollback/$"))
    expect(page.get_by_test_id("apply-diff")).to_have_attribute("data-effect", "rolling")
    expect(page.get_by_test_id("downtime-confirm")).to_have_count(0)  # nothing to confirm: it surges
    watch = ServingWatch(live_panel, name)
    watch.start()
    try:
        page.get_by_test_id("rollback-apply").click()
        page.wait_for_url(re.compile(rf"/deployments/{name}/$"))
        wait_until(lambda: _runs_with(live_panel, name, 1024), 180, f"{name} rolled back")
    finally:
        watch.stopping.set()
        watch.join(10)
    assert watch.not_serving == [], f"not serving in {len(watch.not_serving)} of {watch.reads} reads"
    assert watch.surge_served, "no surge replica ran: the only replica was restarted in place"

    page.goto(f"/deployments/{name}/history/")
    newest = page.get_by_test_id("revisions").locator('tr[data-revision="3"]')
    expect(newest).to_contain_text(words["back"])
    expect(newest).to_contain_text(words["ok"])


def _free_npus(live_panel) -> int:
    with live_panel.api("alice") as api:
        node = api.get(f"/api/v1/nodes/{live_panel.node(NODE)['id']}/").json()
        listed = api.get("/api/v1/deployments/", params={"page_size": 1000}).json()["results"]
    held = {n["logic_id"] for d in listed for n in d["npus"] if n["node"] == NODE}
    # A failed NPU takes no placement (an earlier test's sim fault may have left one failed).
    usable = [n for n in node["npus"] if n.get("health_state", "ok") != "failed"]
    return len([n for n in usable if n["logic_id"] not in held])


@pytest.mark.parametrize(("locale", "apply"), [("en", "Apply"), ("zh-hans", "应用")])
def test_edit_without_room_for_a_surge_needs_the_downtime_box(
    deployments, panel_page, live_panel, locale, apply
):
    name = f"alone-{locale}"
    for index in range(_free_npus(live_panel) - 1):
        deployments(f"filler-{locale}-{index}", spec())  # stopped ones keep their NPUs
    deployments(name, spec(state="running"))
    with live_panel.api("alice") as api:
        wait_until(
            lambda: api.get(f"/api/v1/deployments/{name}/").json()["status"] == "running", 120, f"{name} runs"
        )
    page = panel_page("bob", locale)
    page.goto(f"/deployments/{name}/edit/")
    page.fill("#id_max_model_len", "2048")
    page.get_by_test_id("edit-preview").click()
    expect(page.get_by_test_id("downtime-confirm")).to_be_visible()
    expect(page.locator("body")).to_contain_text("1024")

    page.get_by_role("button", name=apply, exact=True).click()  # the box left unticked: refused
    expect(page.get_by_test_id("edit-errors")).to_contain_text("allow_downtime")
    assert _max_model_len(live_panel, name) == 1024

    page.get_by_test_id("edit-preview").click()
    page.get_by_test_id("allow-downtime").check()
    page.get_by_role("button", name=apply, exact=True).click()
    page.wait_for_url(re.compile(rf"/deployments/{name}/$"))
    wait_until(lambda: _max_model_len(live_panel, name) == 2048, 120, f"{name} takes 2048")


@pytest.mark.parametrize(("locale", "restarting"), [("en", "Restarting"), ("zh-hans", "正在重启")])
def test_restart_without_room_for_a_surge_asks_for_the_downtime_box(
    deployments, panel_page, live_panel, locale, restarting
):
    name = f"restart-alone-{locale}"
    for index in range(_free_npus(live_panel) - 1):
        deployments(f"restart-filler-{locale}-{index}", spec())
    deployments(name, spec(state="running"))
    with live_panel.api("alice") as api:
        wait_until(
            lambda: api.get(f"/api/v1/deployments/{name}/").json()["status"] == "running", 120, f"{name} runs"
        )
    page = panel_page("bob", locale)
    page.goto(f"/deployments/{name}/")
    page.get_by_test_id("action-restart").click()
    page.get_by_test_id("confirm-ok").click()
    expect(page.get_by_test_id("restart-downtime")).to_contain_text(name)
    expect(page.get_by_test_id("downtime-confirm")).to_be_visible()

    page.get_by_test_id("restart-confirmed").click()  # the box left unticked: asked again, nothing restarts
    expect(page.get_by_test_id("restart-downtime")).to_be_visible()

    page.get_by_test_id("allow-downtime").check()
    page.get_by_test_id("restart-confirmed").click()
    page.wait_for_url(re.compile(rf"/deployments/{name}/$"))
    expect(page.locator(".messages .message", has_text=restarting)).to_be_visible()
