"""The Edit page's "Sleep when idle" (issue 36 item 2), in English and 简体中文: turning it on shows the
change and applies idle: to the spec; a node whose engine cannot sleep is refused on the field with the
reason; the deployment's sleep state is on its page."""

import re

import pytest
from django.test import Client

from tests.integration.test_deployment_idle import client, nodes, put, spec, tiny  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db


def page_client(user, language="en") -> Client:
    browser = Client(headers={"accept-language": language})
    browser.force_login(user)
    browser.cookies["django_language"] = language
    return browser


def edit_fields(name: str, **overrides) -> dict:
    from panel.deployments.models import Deployment
    from panel.deployments.pages.edit_views import _initial

    fields = {k: ("" if v is None else v) for k, v in _initial(Deployment.objects.get(name=name)).items()}
    fields["enforce_eager"] = "on" if fields["enforce_eager"] else ""
    fields["idle"] = "on" if fields["idle"] else ""
    fields["autoscale"] = "on" if fields.get("autoscale") else ""
    fields.update(overrides)
    return {k: v for k, v in fields.items() if v != ""}


@pytest.mark.parametrize(
    ("language", "heading", "label"),
    [
        ("en", "Sleep when idle", "Sleep after (s) without a request"),
        ("zh-hans", "空闲时休眠", "无请求多少秒后休眠"),
    ],
)
def test_turning_sleep_on_in_edit_applies_idle(bob, client, tiny, language, heading, label):  # noqa: F811
    from panel.deployments.models import Deployment

    assert put(client, "sleepy", spec(idle=None, state="stopped")).status_code == 201
    browser = page_client(bob, language)
    form = browser.get("/deployments/sleepy/edit/").content.decode()
    assert heading in form
    assert label in form
    assert 'data-testid="idle-fields"' in form

    fields = edit_fields("sleepy", idle="on", idle_sleep_after_s=900, idle_level=2)
    preview = browser.post("/deployments/sleepy/edit/", {**fields, "preview": "1"}).content.decode()
    assert re.search(r'data-change="idle">.*?900', preview, re.S)
    applied = browser.post("/deployments/sleepy/edit/", {**fields, "confirm": "1"})
    assert applied.status_code == 302
    assert Deployment.objects.get(name="sleepy").plan["idle"] == {"sleep_after_s": 900, "level": 2}


def test_a_node_whose_engine_cannot_sleep_is_refused_on_the_field(bob, client, tiny):  # noqa: F811
    assert put(client, "old", spec(node="npu-old", idle=None, state="stopped")).status_code == 201
    page = page_client(bob).post(
        "/deployments/old/edit/", {**edit_fields("old", idle="on", idle_sleep_after_s=600), "preview": "1"}
    )
    text = page.content.decode()
    assert "vllm-ascend 0.9.0rc1 on npu-old has no sleep mode" in text
    assert 'data-testid="edit-apply"' not in text
