"""Replicas on the deployment pages in a real browser: a spec applied with `replicas: 2` through the API
shows as two rows in the list (the second one "replica of"), and a viewer moves from the replica's page to
the primary's through the replicas card, in English and in Chinese."""

import re

from playwright.sync_api import expect

from tests.browser.conftest import MODEL_NAME, MODEL_PATH, wait_until

NAME = "replicated"


def _running(api) -> bool:
    primary = api.get(f"/api/v1/deployments/{NAME}/").json()
    states = [primary["status"]] + [replica["status"] for replica in primary["replicas"]]
    return len(states) == 2 and set(states) == {"running"}


def test_a_viewer_follows_a_replica_to_its_primary(staged_model, panel_page, live_panel):
    spec = {
        "model": MODEL_NAME,
        "path": MODEL_PATH,
        "placement": {"node": "sim-a2", "npus": 1},
        "replicas": 2,
        "engine": {"max_model_len": 1024},
    }
    with live_panel.api("bob") as api:
        applied = api.put(f"/api/v1/deployments/{NAME}/", json=spec)
        assert applied.status_code == 201, applied.text
        try:
            wait_until(lambda: _running(api), 90, "both replicas running")
            page = panel_page("charlie")
            page.goto("/deployments/")
            replica_row = page.locator(f"tr[data-deployment={NAME}-r2]")
            expect(replica_row).to_contain_text(f"replica of {NAME}")
            replica_row.get_by_role("link", name=f"{NAME}-r2").click()
            page.wait_for_url(re.compile(rf"/deployments/{NAME}-r2/$"))
            card = page.get_by_test_id("replicas")
            expect(card).to_contain_text(f"a replica of {NAME}")
            expect(card.locator(f"tr[data-replica={NAME}-r2]")).to_have_attribute("aria-current", "true")
            card.get_by_role("link", name="the primary").click()
            page.wait_for_url(re.compile(rf"/deployments/{NAME}/$"))
            rows = page.get_by_test_id("replicas").locator("tbody tr")
            expect(rows).to_have_count(2)
            expect(rows.nth(1)).to_contain_text("Running")

            chinese = panel_page("charlie", "zh-hans")
            chinese.goto(f"/deployments/{NAME}-r2/")
            expect(chinese.get_by_test_id("replicas")).to_contain_text(f"{NAME} 的副本")
            expect(chinese.get_by_test_id("replicas").locator("h2")).to_have_text("副本")
        finally:
            assert api.delete(f"/api/v1/deployments/{NAME}/").status_code == 202
            wait_until(
                lambda: api.get(f"/api/v1/deployments/{NAME}/").status_code == 404, 60, "the deployment gone"
            )
