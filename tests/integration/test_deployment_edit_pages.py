"""The deployment page's Edit, Scale and Roll back: the dry run's diff and effect before anything is
applied, the apply, the spec kept for a rollback, and who may do it (operators and admins; viewers are
refused; the admin-only vLLM flags stay refused to operators)."""

import asyncio
import re

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.test import Client

from tests.integration.test_deployment_apply import (  # noqa: F401  (fixtures)
    client,
    npu_node,
    pending,
    put,
    running,
    spec,
    tiny,
)

pytestmark = pytest.mark.django_db


def page_client(user) -> Client:
    browser = Client()
    browser.force_login(user)
    return browser


def edit_fields(name: str, **overrides) -> dict:
    """The edit form as the page fills it, with `overrides`."""
    from panel.deployments.models import Deployment
    from panel.deployments.pages.edit_views import _initial

    fields = {k: ("" if v is None else v) for k, v in _initial(Deployment.objects.get(name=name)).items()}
    fields["enforce_eager"] = "on" if fields["enforce_eager"] else ""
    fields.update(overrides)
    return {k: v for k, v in fields.items() if v != ""}


@pytest.fixture
def stopped(client, tiny):  # noqa: F811  (imported fixtures)
    assert put(client, "ci-qwen", spec(state="stopped")).status_code == 201
    return "ci-qwen"


def test_edit_shows_the_change_and_its_effect_then_applies_it_and_rollback_returns(bob, stopped):
    from panel.deployments.models import Deployment

    browser = page_client(bob)
    form = browser.get("/deployments/ci-qwen/edit/").content.decode()
    assert 'name="max_model_len" value="2048"' in form
    preview = browser.post(
        "/deployments/ci-qwen/edit/", edit_fields(stopped, max_model_len=4096, preview="1")
    )
    page = preview.content.decode()
    assert re.search(r'data-change="engine.max_model_len">.*?2048.*?4096', page, re.S)
    assert "takes the new settings when it starts again" in page
    assert 'data-testid="edit-apply"' in page
    assert Deployment.objects.get(name="ci-qwen").spec["max_model_len"] == 2048  # nothing applied yet

    applied = browser.post(
        "/deployments/ci-qwen/edit/", edit_fields(stopped, max_model_len=4096, confirm="1")
    )
    assert applied.status_code == 302
    deployment = Deployment.objects.get(name="ci-qwen")
    assert deployment.spec["max_model_len"] == 4096
    assert deployment.previous_spec["engine"]["max_model_len"] == 2048

    undo = browser.get("/deployments/ci-qwen/rollback/").content.decode()
    assert re.search(r'data-change="engine.max_model_len">.*?4096.*?2048', undo, re.S)
    assert browser.post("/deployments/ci-qwen/rollback/").status_code == 302
    deployment = Deployment.objects.get(name="ci-qwen")
    assert deployment.spec["max_model_len"] == 2048
    assert deployment.previous_spec["engine"]["max_model_len"] == 4096  # a second rollback goes forward


def test_edit_of_a_serving_deployment_says_it_rolls(bob, client, tiny):  # noqa: F811
    put(client, "ci-qwen", spec())
    running("ci-qwen")
    page = page_client(bob).post(
        "/deployments/ci-qwen/edit/", edit_fields("ci-qwen", max_model_len=4096, preview="1")
    )
    assert 'data-effect="rolling"' in page.content.decode()
    assert not pending("deploy")


def test_an_unchanged_edit_offers_no_apply(bob, stopped):
    page = (
        page_client(bob)
        .post("/deployments/ci-qwen/edit/", edit_fields(stopped, preview="1"))
        .content.decode()
    )
    assert 'data-effect="none"' in page
    assert 'data-testid="edit-apply"' not in page


def test_an_edit_error_is_named_by_field(bob, stopped):
    page = page_client(bob).post(
        "/deployments/ci-qwen/edit/", edit_fields(stopped, gpu_memory_utilization="1.5", preview="1")
    )
    errors = re.search(r'data-testid="error-gpu_memory_utilization">(.*?)</ul>', page.content.decode(), re.S)
    assert errors is not None


def test_an_operator_may_not_add_a_code_loading_flag_in_edit_and_an_admin_may(alice, bob, stopped):
    fields = edit_fields(stopped, extra_flags="--trust-remote-code", preview="1")
    refused = page_client(bob).post("/deployments/ci-qwen/edit/", fields).content.decode()
    flags = re.search(r'data-testid="error-extra_flags">(.*?)</ul>', refused, re.S).group(1)
    assert "Only an admin may set --trust-remote-code" in flags
    allowed = page_client(alice).post("/deployments/ci-qwen/edit/", fields).content.decode()
    assert 'data-change="engine.extra_flags"' in allowed


def test_scale_adds_a_replica(bob, stopped, django_capture_on_commit_callbacks):
    from panel.deployments.models import Deployment

    layer = get_channel_layer()
    primary_page = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("deployment.ci-qwen", primary_page)
    with django_capture_on_commit_callbacks(execute=True):
        answer = page_client(bob).post("/deployments/ci-qwen/scale/", {"replicas": "2"})
    assert answer.status_code == 302
    assert Deployment.objects.get(name="ci-qwen").replicas_wanted == 2
    assert Deployment.objects.filter(name="ci-qwen-r2", replica_of__name="ci-qwen").exists()
    # The primary's page is told (and redraws its replicas card), in a type its status never is.
    told = async_to_sync(asyncio.wait_for)(layer.receive(primary_page), 10)["message"]
    assert (told["type"], told["replica"]) == ("deployment.replicas", "ci-qwen-r2")
    card = page_client(bob).get("/deployments/ci-qwen/replicas/").content.decode()
    assert 'data-replica="ci-qwen-r2"' in card


def test_rollback_without_an_earlier_spec_says_so(bob, stopped):
    page = page_client(bob).get("/deployments/ci-qwen/rollback/").content.decode()
    assert "has no earlier spec to roll back to" in page
    assert 'data-testid="rollback-apply"' not in page


def test_a_viewer_sees_no_change_buttons_and_is_refused(charlie, stopped):
    from panel.deployments.models import Deployment

    browser = page_client(charlie)
    detail = browser.get("/deployments/ci-qwen/").content.decode()
    for testid in ("action-edit", "action-scale", "action-rollback"):
        assert f'data-testid="{testid}"' not in detail
    assert browser.get("/deployments/ci-qwen/edit/").status_code == 403
    assert browser.post("/deployments/ci-qwen/edit/", edit_fields(stopped, confirm="1")).status_code == 403
    assert browser.post("/deployments/ci-qwen/scale/", {"replicas": "2"}).status_code == 403
    assert browser.post("/deployments/ci-qwen/rollback/").status_code == 403
    assert Deployment.objects.get(name="ci-qwen").replicas_wanted == 1


def test_an_operator_sees_the_change_buttons(bob, stopped):
    detail = page_client(bob).get("/deployments/ci-qwen/").content.decode()
    assert 'data-testid="action-edit"' in detail
    assert 'data-testid="action-scale"' in detail
