"""The wizard's "share NPUs with …" in a real browser, in English and in Chinese (issue 36 item 3): with one
deployment on the sim host that shares its NPU (gpu_memory_utilization 0.4) and one that does not, the
placement step offers the first NPU with the room it leaves and says why not for the second; choosing the
offer fills the engine step's gpu_memory_utilization with that room, the review says what the shared NPU
keeps free, and the deployment made shares its NPU (its spec says so)."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import MODEL_NAME, MODEL_PATH, delete_deployments


@pytest.fixture
def tenants(staged_model, live_panel):
    """Two stopped deployments of the tiny model on one NPU each: one shares at 0.4, one does not."""
    made = []

    def make(name: str, share: bool) -> int:
        spec = {
            "model": MODEL_NAME,
            "path": MODEL_PATH,
            "placement": {"node": "sim-a2", "npus": 1, "share": share},
            "engine": {"max_model_len": 1024, "gpu_memory_utilization": 0.4},
            "state": "stopped",
        }
        with live_panel.api("bob") as api:
            answer = api.put(f"/api/v1/deployments/{name}/", json=spec)
            assert answer.status_code == 201, answer.text
            made.append(name)
            return api.get(f"/api/v1/deployments/{name}/?format=spec").json()["placement"]["npus"][0]

    yield make, made
    delete_deployments(live_panel, made)


@pytest.mark.parametrize(
    ("locale", "words"),
    [
        ("en", {"heading": "Share NPUs with other deployments", "offer": "Share NPU", "kept": "stay free"}),
        ("zh-hans", {"heading": "与其他部署共享 NPU", "offer": "共享", "kept": "仍空闲"}),
    ],
)
def test_the_wizard_offers_to_share_an_npu_and_says_why_not_for_one_that_does_not_share(
    tenants, panel_page, live_panel, locale, words
):
    make, made = tenants
    sharing = make(f"share-a-{locale}", share=True)
    alone = make(f"alone-{locale}", share=False)
    name = f"share-b-{locale}"
    made.append(name)

    page = panel_page("bob", locale)
    page.goto("/deployments/new/")
    page.locator("[data-testid=model-table] tr", has_text=MODEL_NAME).locator("input[type=radio]").check()
    page.fill("#id_name", name)
    page.get_by_test_id("wizard-next").click()

    page.wait_for_url(re.compile(r"/deployments/new/placement/$"))
    offers = page.get_by_test_id("share-offers")
    expect(offers).to_contain_text(words["heading"])
    offer = offers.locator(f'li[data-share="sim-a2:{sharing}"]')
    expect(offer).to_contain_text(words["offer"])
    expect(offer).to_contain_text(f"share-a-{locale}")
    expect(offer).to_contain_text("0.6")  # (64 - 3 - 24.4) GiB of the 61 GiB torch_npu sees
    refused = offers.locator(f'li[data-share="sim-a2:{alone}"] [data-testid=share-refused]')
    expect(refused).to_contain_text(f"alone-{locale}")
    for box in page.locator("section[data-node] input[name=npus]:checked").all():
        box.uncheck()  # the planner's suggestion: a whole free NPU
    offer.locator("input[name=npus]").check()
    page.get_by_test_id("wizard-next").click()

    page.wait_for_url(re.compile(r"/deployments/new/engine/$"))
    expect(page.locator("#id_gpu_memory_utilization")).to_have_value("0.6")
    page.fill("#id_gpu_memory_utilization", "0.3")
    page.fill("#id_max_model_len", "1024")
    page.get_by_test_id("wizard-next").click()

    page.wait_for_url(re.compile(r"/deployments/new/review/$"))
    expect(page.get_by_test_id("review-problems")).to_have_count(0)
    expect(page.locator("body")).to_contain_text(words["kept"])
    page.get_by_test_id("deploy").click()
    page.wait_for_url(re.compile(rf"/deployments/{name}/$"))
    with live_panel.api("alice") as api:
        spec = api.get(f"/api/v1/deployments/{name}/?format=spec").json()
    assert spec["placement"] == {"node": "sim-a2", "npus": [sharing], "share": True}
    assert spec["engine"]["gpu_memory_utilization"] == 0.3
