"""Every main page in both languages, as an admin sees it, saved as a full-page screenshot under
var/screenshots/ (gitignored): what reviewers look at before a release, and what a layout change is checked
against. Each page must also answer 200, render in its language and throw no script error.

Set PANEL_SCREENSHOTS=<dir> to save them elsewhere."""

import os
from pathlib import Path

import pytest

from tests.browser.conftest import REPO

SCREENSHOTS = Path(os.environ.get("PANEL_SCREENSHOTS") or REPO / "var" / "screenshots")
SIM_NODE = "sim-a2"
# (file name, path); {model}, {deployment} and {operation} are filled from what the live panel holds.
PAGES = (
    ("dashboard", "/"),
    ("nodes", "/nodes/"),
    ("node", f"/nodes/{SIM_NODE}/"),
    ("node-add", "/nodes/add/"),
    ("models", "/models/"),
    ("model", "/models/{model}/"),
    ("deployments", "/deployments/"),
    ("deployment", "/deployments/{deployment}/"),
    ("wizard", "/deployments/new/"),
    ("benchmarks", "/deployments/benchmarks/"),
    ("operations", "/operations/"),
    ("operation", "/operations/{operation}/"),
    ("packages", "/provisioning/packages/"),
    ("profiles", "/provisioning/profiles/"),
    ("node-provisioning", f"/provisioning/nodes/{SIM_NODE}/"),
    ("alerts", "/alerts/"),
    ("settings", "/accounts/settings/"),
    ("api-docs", "/api/docs/"),
)


@pytest.fixture(scope="module")
def holdings(live_panel, staged_model):
    """Ids of one model, deployment and operation, so their detail pages are in the walk."""
    with live_panel.api("alice") as client:
        deployments = client.get("/api/v1/deployments/").json()["results"]
        operations = client.get("/api/v1/operations/").json()["results"]
    return {
        "model": staged_model["id"],
        "deployment": deployments[0]["name"] if deployments else None,
        "operation": operations[0]["id"] if operations else None,
    }


@pytest.mark.parametrize("locale", ["en", "zh-hans"])
def test_every_main_page_renders_and_is_saved_as_a_screenshot(holdings, panel_page, locale):
    page = panel_page("alice", locale=locale)
    errors = []
    page.on("pageerror", lambda error: errors.append(f"{page.url}: {error}"))
    folder = SCREENSHOTS / locale
    folder.mkdir(parents=True, exist_ok=True)
    walked = []
    for name, path in PAGES:
        try:
            url = path.format(**holdings)
        except KeyError:
            continue
        if "None" in url:
            continue  # nothing of that kind in this panel yet
        response = page.goto(url)
        assert response.status == 200, f"{url} answered {response.status}"
        page.wait_for_load_state("load")
        page.wait_for_timeout(800)  # live figures and charts fill in
        if not url.startswith("/api/"):  # the API docs are Swagger UI's own page
            assert page.locator("html").get_attribute("lang") == locale
        page.screenshot(path=str(folder / f"{name}.png"), full_page=True)
        walked.append(name)
    assert not errors, "script errors:\n" + "\n".join(errors)
    assert len(walked) >= len(PAGES) - 2, walked
