"""Pages a role may not open and addresses with no page answer in the panel's layout, in the viewer's
language, with a way back — not Django's bare "403 Forbidden" / "Not Found"."""

import re

import pytest
from playwright.sync_api import expect


@pytest.mark.parametrize(
    ("locale", "heading", "says", "back"),
    [
        ("en", "No access", "not open to your role (Viewer)", "Dashboard"),
        ("zh-hans", "无权访问", "您的角色（只读用户）", "仪表盘"),
    ],
)
def test_a_viewer_on_an_admin_page_gets_the_panels_403_page_with_a_way_back(
    live_panel, panel_page, locale, heading, says, back
):
    page = panel_page(user="charlie", locale=locale)
    page.goto("/nodes/")
    response = page.goto("/accounts/users/")
    assert response.status == 403
    expect(page.locator("h1")).to_have_text(heading)
    expect(page.get_by_test_id("forbidden")).to_contain_text(says)
    expect(page.locator("nav.sidebar")).to_be_visible()  # the panel's own layout
    page.get_by_test_id("way-back").locator("[data-history-back]").click()
    expect(page).to_have_url(re.compile(r"/nodes/$"))
    page.go_forward()
    page.get_by_test_id("way-back").get_by_role("link", name=back).click()
    expect(page).to_have_url(f"{live_panel.url}/")


def test_an_address_with_no_page_gets_the_panels_404_page(live_panel, panel_page):
    page = panel_page(user="bob", locale="zh-hans")
    response = page.goto("/deployments/no-such-deployment/")
    assert response.status == 404
    expect(page.locator("h1")).to_have_text("未找到")
    expect(page.get_by_test_id("not-found")).to_contain_text("/deployments/no-such-deployment/")
    expect(page.get_by_test_id("way-back").get_by_role("link", name="仪表盘")).to_be_visible()
