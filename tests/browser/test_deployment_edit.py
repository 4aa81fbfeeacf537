"""Day two on a deployment page in a real browser: Edit shows what applying changes (the diff and its
effect) before it applies, Roll back shows and applies the way back, and Scale adds a replica, in English
and in Chinese. The deployment is kept stopped so that each apply only changes its settings."""

import re

import pytest
from playwright.sync_api import expect


def _max_model_len(live_panel, name: str) -> int:
    with live_panel.api("alice") as api:
        return api.get(f"/api/v1/deployments/{name}/?format=spec").json()["engine"]["max_model_len"]


@pytest.mark.parametrize(
    ("locale", "words"),
    [
        (
            "en",
            {
                "edit": "Edit",
                "show": "Show the changes",
                "apply": "Apply",
                "back": "Roll back",
                "kept": "takes the new settings",
            },
        ),
        (
            "zh-hans",
            {
                "edit": "编辑",
                "show": "查看变更",
                "apply": "应用",
                "back": "回滚",
                "kept": "再次启动时采用新设置",
            },
        ),
    ],
)
def test_edit_shows_the_diff_applies_it_and_rolls_back(
    stopped_deployment, panel_page, live_panel, locale, words
):
    name = stopped_deployment(f"edited-{locale}")
    page = panel_page("bob", locale)
    page.goto(f"/deployments/{name}/")
    page.get_by_test_id("action-edit").click()
    page.wait_for_url(re.compile(rf"/deployments/{name}/edit/$"))
    expect(page.get_by_test_id("action-edit")).to_have_count(0)
    page.fill("#id_max_model_len", "2048")
    page.get_by_role("button", name=words["show"]).click()
    change = page.locator('tr[data-change="engine.max_model_len"]')
    expect(change).to_contain_text("1024")
    expect(change).to_contain_text("2048")
    expect(page.get_by_test_id("apply-effect")).to_contain_text(words["kept"])
    assert _max_model_len(live_panel, name) == 1024  # shown, not applied

    page.get_by_role("button", name=words["apply"], exact=True).click()
    page.wait_for_url(re.compile(rf"/deployments/{name}/$"))
    assert _max_model_len(live_panel, name) == 2048

    page.get_by_test_id("action-rollback").click()
    page.wait_for_url(re.compile(rf"/deployments/{name}/rollback/$"))
    back = page.locator('tr[data-change="engine.max_model_len"]')
    expect(back).to_contain_text("2048")
    expect(back).to_contain_text("1024")
    page.get_by_role("button", name=words["back"]).click()
    page.wait_for_url(re.compile(rf"/deployments/{name}/$"))
    assert _max_model_len(live_panel, name) == 1024


@pytest.mark.parametrize(("locale", "scale"), [("en", "Scale"), ("zh-hans", "扩缩")])
def test_scale_adds_a_replica_row(stopped_deployment, panel_page, locale, scale):
    name = stopped_deployment(f"scaled-{locale}")
    page = panel_page("bob", locale)
    page.goto(f"/deployments/{name}/")
    page.get_by_test_id("scale-form").locator("input[name=replicas]").fill("2")
    page.get_by_role("button", name=scale, exact=True).click()
    page.wait_for_url(re.compile(rf"/deployments/{name}/$"))
    expect(page.get_by_test_id("replicas").locator(f"tr[data-replica={name}-r2]")).to_have_count(1)
