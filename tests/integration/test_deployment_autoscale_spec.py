"""The spec's `autoscale:` through `PUT /api/v1/deployments/{name}/`, the Edit page and the deployment page:
strict validation, the dry run's diff saying the count is the autoscaler's, the round trip, a replicas outside
[min, max] refused, and Scale refused while autoscaling owns the count. Agents are not involved."""

import re

import pytest

from tests.integration.test_deployment_apply import client, npu_node, put, spec, tiny
from tests.integration.test_deployment_edit_pages import edit_fields, page_client
from tests.integration.test_deployment_replicas import rows, settle

pytestmark = pytest.mark.django_db

__all__ = ["client", "npu_node", "tiny"]  # fixtures used by name

SCALE = {"min": 1, "max": 3, "target": {"waiting_per_replica": 4}, "up_after_s": 30, "down_after_s": 120}


def one_npu(**overrides):
    return spec(placement={"node": "npu-a", "npus": 1}, **overrides)


@pytest.mark.parametrize(
    ("autoscale", "field", "text"),
    [
        ({**SCALE, "min": 4}, "min", "min (4) is above max (3)."),
        ({**SCALE, "max": 65}, "max", "Ensure this value is less than or equal to 64."),
        ({**SCALE, "target": {}}, "target", "Give exactly one target"),
        ({**SCALE, "target": {"kv_usage": 0.8, "ttft_p90_ms": 500}}, "target", "Give exactly one target"),
        ({**SCALE, "target": {"kv_usage": 1.5}}, "target", "less than or equal to 1.0"),
        ({**SCALE, "up_after_s": 1}, "up_after_s", "greater than or equal to 2"),
    ],
)
def test_an_autoscale_block_that_makes_no_sense_is_refused_by_field(client, tiny, autoscale, field, text):
    answer = put(client, "chat", one_npu(autoscale=autoscale))
    assert answer.status_code == 400, answer.json()
    errors = answer.json()["errors"]
    assert text in str([texts for key, texts in errors.items() if key.startswith(f"autoscale.{field}")])


def test_an_unknown_key_in_autoscale_is_refused(client, tiny):
    answer = put(client, "chat", one_npu(autoscale={**SCALE, "cooldown": 5}))
    assert answer.status_code == 400
    assert "autoscale.cooldown" in str(answer.json())


def test_replicas_outside_the_range_is_refused_and_pinned_npus_cannot_grow(client, tiny):
    answer = put(client, "chat", one_npu(replicas=5, autoscale=SCALE))
    assert answer.status_code == 400
    (text,) = answer.json()["errors"]["replicas"]
    assert "replicas 5 is outside autoscale's range 1..3" in text
    pinned = put(client, "chat", spec(placement={"node": "npu-a", "npus": [0]}, autoscale=SCALE))
    assert pinned.status_code == 400
    assert "give placement.npus as a count" in str(pinned.json()["errors"]["autoscale"])


def test_the_diff_says_the_count_becomes_the_autoscalers_and_the_spec_round_trips(client, tiny):
    assert put(client, "chat", one_npu(replicas=2)).status_code == 201
    settle()
    dry = put(client, "chat", one_npu(autoscale=SCALE), dry_run="true").json()
    assert dry["effect"] == "none"  # nothing that runs changes: the count stays 2, within 1..3
    assert dry["changes"] == [
        {"field": "autoscale", "from": None, "to": SCALE},
        {"field": "replicas (autoscaler)", "from": 2, "to": "2, then the autoscaler's within 1..3"},
    ]
    assert dry["spec"]["autoscale"] == SCALE

    applied = put(client, "chat", one_npu(autoscale=SCALE))
    assert applied.status_code == 202, applied.json()
    own = client.get("/api/v1/deployments/chat/?format=spec").json()
    assert own["autoscale"] == SCALE
    assert own["replicas"] == 2
    assert put(client, "chat", own).json()["result"] == "unchanged"
    assert put(client, "chat", one_npu(autoscale=SCALE)).json()["result"] == "unchanged"  # count kept


def test_a_new_range_moves_the_count_into_it_and_turning_it_off_keeps_the_count(client, tiny):
    assert put(client, "chat", one_npu(autoscale=SCALE)).status_code == 201
    settle()
    raised = put(client, "chat", one_npu(autoscale={**SCALE, "min": 2}))
    assert (raised.json()["effect"], raised.json()["replicas"]) == ("scale", {"wanted": 2, "now": 1})
    settle()
    assert sorted(rows("chat")) == ["chat", "chat-r2"]
    off = put(client, "chat", one_npu(replicas=2))
    assert off.json()["changes"] == [{"field": "autoscale", "from": {**SCALE, "min": 2}, "to": None}]
    assert "autoscale" not in client.get("/api/v1/deployments/chat/?format=spec").json()


def test_the_edit_page_sets_autoscaling_and_the_page_shows_it_in_both_languages(bob, client, tiny):
    from panel.deployments.models import Deployment

    assert put(client, "chat", one_npu()).status_code == 201
    settle()
    browser = page_client(bob)
    fields = {
        "autoscale": "on",
        "autoscale_min": 1,
        "autoscale_max": 3,
        "autoscale_target": "ttft_p90_ms",
        "autoscale_value": 800,
        "autoscale_up_after_s": 30,
        "autoscale_down_after_s": 120,
    }
    wrong = browser.post(
        "/deployments/chat/edit/", edit_fields("chat", **{**fields, "autoscale_min": 4}, preview="1")
    )
    assert "min (4) is above max (3)." in wrong.content.decode()
    preview = browser.post("/deployments/chat/edit/", edit_fields("chat", **fields, preview="1"))
    assert re.search(
        r'data-change="replicas \(autoscaler\)">.*?1, then the autoscaler', preview.content.decode(), re.S
    )
    assert (
        browser.post("/deployments/chat/edit/", edit_fields("chat", **fields, confirm="1")).status_code == 302
    )
    scale = Deployment.objects.get(name="chat").autoscale
    assert scale == {
        "min": 1,
        "max": 3,
        "target": {"ttft_p90_ms": 800.0},
        "up_after_s": 30,
        "down_after_s": 120,
    }

    page = browser.get("/deployments/chat/").content.decode()
    assert (
        "1–3 replicas, keeping time to first token p90 under 800.0 ms; up after 30 s, down after 120 s"
        in page
    )
    assert 'data-testid="scale-form"' not in page
    refused = browser.post("/deployments/chat/scale/", {"replicas": "2"}, follow=True).content.decode()
    assert "the autoscaler owns the count" in refused
    browser.cookies["django_language"] = "zh-hans"
    page = browser.get("/deployments/chat/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "自动扩缩" in page
    assert "首个令牌时间 p90 低于 800.0 ms" in page
    edit = browser.get("/deployments/chat/edit/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "随负载伸缩副本数" in edit
