"""The API docs page in a real browser: it needs a signed-in user, and Swagger UI fetches the schema with
that user's session (the schema endpoint refuses anonymous requests), so the operations are listed."""

import re

from playwright.sync_api import expect


def test_a_signed_in_viewer_sees_the_api_operations(panel_page):
    page = panel_page(user="charlie")
    page.goto("/api/docs/")
    expect(page.locator(".opblock-summary-path[data-path='/api/v1/nodes/']").first).to_be_visible()
    expect(page.locator(".errors-wrapper")).to_have_count(0)


def test_an_anonymous_browser_is_sent_to_sign_in(browser, live_panel):
    context = browser.new_context(base_url=live_panel.url)
    try:
        page = context.new_page()
        page.goto("/api/docs/")
        expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/api/docs/"))
    finally:
        context.close()
