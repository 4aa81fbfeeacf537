"""An operator picks how the gateway routes a deployment, in a real browser: Edit's routing select shows the
change in the diff (its effect: nothing restarts), Apply sets it, and the deployment page names the policy,
in English and in Chinese. The deployment is kept stopped so the apply only changes its settings."""

import re

import pytest
from playwright.sync_api import expect


@pytest.mark.parametrize(
    ("locale", "words"),
    [
        ("en", {"show": "Show the changes", "apply": "Apply", "prefix": "Prompt prefix (cache-aware)"}),
        ("zh-hans", {"show": "查看变更", "apply": "应用", "prefix": "提示词前缀（感知缓存）"}),
    ],
)
def test_an_operator_sets_prefix_routing_on_edit_and_the_page_names_it(
    stopped_deployment, panel_page, live_panel, locale, words
):
    name = stopped_deployment(f"routed-{locale}")
    page = panel_page("bob", locale)
    page.goto(f"/deployments/{name}/edit/")
    page.select_option("#id_routing", label=words["prefix"])
    page.get_by_role("button", name=words["show"]).click()
    change = page.locator('tr[data-change="routing"]')
    expect(change).to_contain_text("least_outstanding")
    expect(change).to_contain_text("prefix")
    page.get_by_role("button", name=words["apply"], exact=True).click()
    page.wait_for_url(re.compile(rf"/deployments/{name}/$"))
    expect(page.get_by_test_id("routing")).to_contain_text(words["prefix"])
    with live_panel.api("alice") as api:
        assert api.get(f"/api/v1/deployments/{name}/").json()["routing"] == "prefix"
