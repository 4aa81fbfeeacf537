"""The Edit page's topology (issue 35): a prefill/decode deployment shows each role's engines, node and NPUs
and its connector; a change per role is shown as a diff like any other and applied as the spec's apply says
(a connector the node's version lacks refused on its field with the launch matrix's reason); each role's
autoscaling is set there, shown in the diff, applied, and said on the deployment page in place of that role's
count; and sleep is offered only where the engines can sleep, with the planner's reason where they cannot, in
both languages."""

import re

import pytest

from tests.integration.test_deployment_apply import client, npu_node, put, tiny
from tests.integration.test_deployment_idle_page import edit_fields, page_client
from tests.integration.test_deployment_replicas import settle
from tests.integration.test_deployment_roles import split, versions
from tests.wizard_steps import DECODE_AUTOSCALE_FIELDS

pytestmark = pytest.mark.django_db

__all__ = ["client", "npu_node", "tiny", "versions"]  # fixtures used by name


def role_fields(name: str, **overrides) -> dict:
    fields = edit_fields(name)
    fields.update({key: str(value) for key, value in overrides.items()})
    return {key: value for key, value in fields.items() if value != ""}


def test_the_edit_page_shows_each_role_and_its_connector(bob, client, tiny, versions):
    assert put(client, "chat", split(prefill=2, decode=1)).status_code == 201
    settle()
    page = page_client(bob).get("/deployments/chat/edit/").content.decode()
    assert re.search(r'<input type="radio" name="topology" value="pd"[^>]*checked', page)
    assert re.search(r'name="prefill_replicas" value="2"', page)
    assert re.search(r'name="decode_replicas" value="1"', page)
    assert re.search(r'<input type="radio" name="kv_connector" value="mooncake"[^>]*checked', page)


def test_a_change_per_role_is_a_diff_and_applied_as_the_spec_says(bob, client, tiny, versions):
    from panel.deployments.models import Deployment

    assert put(client, "chat", split()).status_code == 201
    settle()
    browser = page_client(bob)
    fields = role_fields("chat", decode_replicas=2)
    preview = browser.post("/deployments/chat/edit/", {**fields, "preview": "1"}).content.decode()
    change = re.search(r'<tr data-change="(roles|replicas)">(.*?)</tr>', preview, re.S)
    assert change is not None, preview[:4000]
    assert re.search(r">\s*2\s*<|decode.{0,40}2", change.group(2), re.S)
    assert not Deployment.objects.filter(name="chat-d2").exists()  # shown, not applied
    applied = browser.post("/deployments/chat/edit/", {**fields, "confirm": "1"})
    assert applied.status_code == 302, re.findall(
        r'data-testid="edit-errors">(.*?)</div>', applied.content.decode()
    )
    assert Deployment.objects.get(name="chat-d2").role == "decode"
    assert Deployment.objects.get(name="chat").roles_wanted == {"prefill": 1, "decode": 2}


def test_an_unusable_connector_on_edit_is_refused_with_the_matrix_reason(bob, client, tiny, versions):
    assert put(client, "chat", split()).status_code == 201
    settle()
    page = page_client(bob).post(
        "/deployments/chat/edit/", {**role_fields("chat", kv_connector="nixl"), "preview": "1"}
    )
    text = page.content.decode()
    assert 'data-connector="nixl"' in text
    assert "the nixl connector does not run on vllm-ascend" in text
    errors = re.search(r'data-testid="error-kv_connector">(.*?)</ul>', text, re.S)
    assert errors is not None
    assert "nixl" in errors.group(1)
    assert 'data-testid="edit-apply"' not in text


@pytest.mark.parametrize(
    ("language", "topology", "refused"),
    [("en", "Topology", "These engines cannot sleep"), ("zh-hans", "拓扑", "这些引擎无法休眠")],
)
def test_sleep_is_offered_on_edit_only_where_the_engines_can_sleep(
    bob, client, tiny, versions, language, topology, refused
):
    body = {"model": "tiny-qwen", "path": "/models/tiny-qwen", "placement": {"node": "npu-a", "npus": 1}}
    assert put(client, "plain", {**body, "state": "stopped"}).status_code == 201
    page = page_client(bob, language).get("/deployments/plain/edit/").content.decode()
    assert topology in page
    assert re.search(r'<input type="radio" name="topology" value="pool"[^>]*checked', page)
    box = re.search(r'data-testid="sleep-refused">(.*?)</div>\s*</div>', page, re.S)
    assert box is not None
    assert refused in box.group(1)
    assert "npu-a" in box.group(1)
    assert 'name="idle"' not in page


@pytest.mark.parametrize(
    ("language", "heading", "summary"),
    [("en", "Autoscaling per role", "1–3 replicas"), ("zh-hans", "按角色自动扩缩", "1–3 个副本")],
)
def test_each_role_scales_with_the_load_from_edit_and_the_page_says_so(
    bob, client, tiny, versions, language, heading, summary
):
    from panel.deployments.models import Deployment

    assert put(client, "chat", split()).status_code == 201
    settle()
    browser = page_client(bob, language)
    assert heading in browser.get("/deployments/chat/edit/").content.decode()
    fields = role_fields("chat", **DECODE_AUTOSCALE_FIELDS)
    preview = browser.post("/deployments/chat/edit/", {**fields, "preview": "1"}).content.decode()
    line = re.search(r'<tr data-change="autoscale">(.*?)</tr>', preview, re.S)
    assert line is not None, preview[:4000]
    assert 'data-field="role">decode<' in line.group(1)
    assert "kv_usage" in line.group(1)
    applied = browser.post("/deployments/chat/edit/", {**fields, "confirm": "1"})
    assert applied.status_code == 302, applied.content.decode()[:4000]
    scales = {"min": 1, "max": 3, "target": {"kv_usage": 0.8}, "up_after_s": 30, "down_after_s": 300}
    assert Deployment.objects.get(name="chat").autoscale == {"roles": {"decode": scales}}

    page = browser.get("/deployments/chat/").content.decode()
    auto = re.search(r'data-testid="scale-auto-decode".*?</div>', page, re.S)
    assert auto is not None
    assert summary in auto.group(0)
    assert 'data-testid="scale-form-prefill"' in page  # prefill's count is still set by hand
    assert 'data-testid="scale-form-decode"' not in page
    edit = browser.get("/deployments/chat/edit/").content.decode()
    assert re.search(r'name="decode_autoscale" id="id_decode_autoscale" checked', edit)


def test_a_role_range_the_spec_refuses_is_said_on_its_field(bob, client, tiny, versions):
    assert put(client, "chat", split()).status_code == 201
    settle()
    fields = role_fields("chat", **{**DECODE_AUTOSCALE_FIELDS, "decode_autoscale_min": "0"})
    page = page_client(bob).post("/deployments/chat/edit/", {**fields, "preview": "1"}).content.decode()
    errors = re.search(r'data-testid="error-decode_autoscale_min">(.*?)</ul>', page, re.S)
    assert errors is not None, page[:4000]
    assert "A role keeps at least one engine" in errors.group(1)
    assert 'data-testid="edit-apply"' not in page
