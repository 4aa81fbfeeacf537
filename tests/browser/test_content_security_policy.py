"""The pages work under the Content-Security-Policy (panel.core.web.security_headers): opened in Chromium, the
dashboard, the nodes, the deployments and their wizard, the operations and the API docs report no
violation and no script error, their scripts run (the theme is set before paint, the live dashboard
fills, the docs list operations), and the language switch, no longer an inline handler, still switches."""

import pytest
from playwright.sync_api import expect

PAGES = ["/", "/nodes/", "/deployments/", "/deployments/new/", "/models/", "/usage/"]


@pytest.fixture
def watched(panel_page):
    """A signed-in page that records CSP violations and script errors."""
    page = panel_page(bypass_csp=False)
    problems = []
    page.on(
        "console", lambda message: "Content Security Policy" in message.text and problems.append(message.text)
    )
    page.on("pageerror", lambda error: problems.append(f"script error: {error}"))
    page.problems = problems
    return page


def test_every_page_runs_its_scripts_under_the_policy(watched):
    for path in PAGES:
        answer = watched.goto(path)
        assert answer.status == 200, path
        assert "script-src 'self'" in answer.headers["content-security-policy"]
        watched.wait_for_load_state("networkidle")
        assert watched.evaluate("document.documentElement.dataset.theme") in ("light", "dark"), path
    docs = watched.goto("/api/docs/")  # Swagger UI's own page: its script comes from the panel, not inline
    assert "script-src 'self'" in docs.headers["content-security-policy"]
    expect(watched.locator(".opblock").first).to_be_visible(timeout=60_000)
    assert watched.problems == []


def test_the_language_switch_switches_without_an_inline_handler(watched):
    watched.goto("/nodes/")
    for language in ("zh-hans", "en"):
        # The switch's listener comes with the page's module script: each switch waits for the page it
        # brings to have loaded (its scripts run), or the next change could come before the listener.
        with watched.expect_navigation(wait_until="load"):
            watched.select_option("select[name=language]", language)
        expect(watched.locator("html")).to_have_attribute("lang", language)
    assert watched.problems == []
