"""Scaling one role of a 1P1D deployment from its page in a real browser, in English and in Chinese (issue
35): the Scale form has a count per role; a decode count that does not fit on the sim host is refused on
that count, and two decode engines are taken, the prefill left as it was."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import MODEL_NAME, MODEL_PATH
from tests.browser.conftest import MOONCAKE_NODE as SIM_NODE
from tests.browser.test_deployments import screenshot


def one_p_one_d(live_panel, name: str) -> None:
    """A stopped 1P1D deployment over Mooncake on the sim host, one NPU per engine."""
    spec = {
        "model": MODEL_NAME,
        "path": MODEL_PATH,
        "placement": {"node": SIM_NODE, "npus": 1},
        "kv_connector": "mooncake",
        "roles": {"prefill": {"replicas": 1}, "decode": {"replicas": 1}},
        "engine": {"max_model_len": 1024},
        "state": "stopped",
    }
    with live_panel.api("bob") as api:
        answer = api.put(f"/api/v1/deployments/{name}/", json=spec)
        assert answer.status_code == 201, answer.text


@pytest.mark.parametrize(
    ("locale", "words"),
    [
        ("en", {"decode": "Decode replicas", "no_room": "does not fit"}),
        ("zh-hans", {"decode": "解码副本", "no_room": "放不下"}),
    ],
)
def test_an_operator_scales_the_decode_role_from_the_page(
    mooncake_stack, cleanup, panel_page, live_panel, locale, words
):
    name = f"pd-scale-{locale}"
    cleanup.append(name)
    one_p_one_d(live_panel, name)
    page = panel_page("bob", locale)
    page.goto(f"/deployments/{name}/")
    expect(page.get_by_test_id("scale-form")).to_have_count(0)
    decode = page.get_by_test_id("scale-form-decode")
    expect(decode).to_contain_text(words["decode"])
    expect(page.get_by_test_id("scale-replicas-prefill")).to_have_value("1")
    expect(page.get_by_test_id("scale-replicas-decode")).to_have_value("1")

    # More decode engines than the host's NPUs: refused on the decode count, nothing made.
    page.get_by_test_id("scale-replicas-decode").fill("16")
    page.get_by_test_id("action-scale-decode").click()
    page.wait_for_url(re.compile(rf"/deployments/{name}/scale/$"))
    expect(page.get_by_test_id("scale-error-decode")).to_contain_text(words["no_room"])
    expect(page.get_by_test_id("scale-error-prefill")).to_have_count(0)
    expect(page.get_by_test_id("scale-replicas-decode")).to_have_value("16")  # what was asked, beside why not
    screenshot(page, f"scale-roles-refused-{locale}")

    page.get_by_test_id("scale-replicas-decode").fill("2")
    page.get_by_test_id("action-scale-decode").click()
    page.wait_for_url(re.compile(rf"/deployments/{name}/$"))
    expect(page.get_by_test_id("scale-replicas-decode")).to_have_value("2")
    expect(page.get_by_test_id("scale-replicas-prefill")).to_have_value("1")
    expect(page.get_by_test_id("replicas").locator(f"tr[data-replica={name}-d2]")).to_have_count(1)
    screenshot(page, f"scale-roles-done-{locale}")
    with live_panel.api("alice") as api:
        spec = api.get(f"/api/v1/deployments/{name}/?format=spec").json()
    assert (spec["roles"]["prefill"]["replicas"], spec["roles"]["decode"]["replicas"]) == (1, 2)
