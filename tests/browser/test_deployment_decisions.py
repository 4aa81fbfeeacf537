"""The deployment page's Decisions card in a real browser, in English and Chinese: the recorded decisions
(docs/serving-plane.md §2) with their kind, who took them and why in the page's language, and a new one
appearing live (the `deployment.decision` frame) without a reload."""

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import MODEL_NAME, MODEL_PATH, SIM_NODES, wait_until

NODE = SIM_NODES[0][0]


def spec(**extra) -> dict:
    return {
        "model": MODEL_NAME,
        "path": MODEL_PATH,
        "placement": {"node": NODE, "npus": 1},
        "engine": {"max_model_len": 1024},
        "state": "stopped",
        **extra,
    }


@pytest.fixture
def deployment(staged_model, live_panel):
    """`deployment(name)`: a stopped deployment bob applied through the API, deleted afterwards."""
    made = []

    def make(name: str) -> str:
        with live_panel.api("bob") as api:
            answer = api.put(f"/api/v1/deployments/{name}/", json=spec())
            assert answer.status_code in (201, 202), answer.text
        made.append(name)
        return name

    yield make
    with live_panel.api("alice") as api:
        for name in made:
            api.delete(f"/api/v1/deployments/{name}/")
            wait_until(
                lambda name=name: api.get(f"/api/v1/deployments/{name}/").status_code == 404, 90, "gone"
            )


@pytest.mark.parametrize(
    ("locale", "words"),
    [
        (
            "en",
            {"card": "Decisions", "kind": "Revision", "done": "Done", "created": "Revision 1: created.",
             "applied": "Revision 2 applied: labels changed."},
        ),
        (
            "zh-hans",
            {"card": "决策记录", "kind": "修订版本", "done": "已完成", "created": "修订版本 1：已创建。",
             "applied": "已应用修订版本 2：labels 已更改。"},
        ),
    ],
)  # fmt: skip
def test_the_decisions_card_shows_each_decision_and_a_new_one_live(
    deployment, panel_page, live_panel, locale, words
):
    name = deployment(f"decisions-{locale}")
    page = panel_page("charlie", locale)
    page.goto(f"/deployments/{name}/")
    card = page.get_by_test_id("decisions")
    expect(card.locator("h2")).to_have_text(words["card"])
    items = card.locator("li[data-decision]")
    expect(items).to_have_count(1)
    first = items.first
    expect(first.locator('[data-field="kind"]')).to_have_text(words["kind"])
    expect(first.locator('[data-field="who"]')).to_have_text("bob")
    expect(first.locator('[data-field="outcome"]')).to_have_text(words["done"])
    expect(first.locator('[data-field="decision-reason"]')).to_have_text(words["created"])
    expect(first.locator('[data-field="figures"]')).to_have_text("revision=1")

    with live_panel.api("bob") as api:  # a change while the page is open: the frame brings it in
        answer = api.put(f"/api/v1/deployments/{name}/", json=spec(labels={"team": "search"}))
        assert answer.status_code in (200, 202), answer.text
    expect(items).to_have_count(2)
    expect(items.first.locator('[data-field="decision-reason"]')).to_have_text(words["applied"])
    expect(items.first.locator('[data-field="figures"]')).to_have_text("revision=2")
    expect(card.locator("time").first).not_to_be_empty()
