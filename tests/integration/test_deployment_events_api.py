"""`GET /api/v1/deployments/{id or name}/events/`: the recorded decisions, newest first, a page at a time,
filtered by kind and role, each reason in the request's language beside its parts; seen by whoever sees the
deployment."""

import pytest

from panel.catalog.models import Model
from panel.core.domain.choices import DecisionKind
from panel.deployments import decisions, reasons
from panel.deployments.models import Deployment
from tests.conftest import api_client_for

pytestmark = [pytest.mark.django_db]


@pytest.fixture
def qwen():
    deployment = Deployment.objects.create(name="qwen", model=Model.objects.create(name="m"))
    Deployment.objects.create(name="qwen-r2", model=deployment.model, replica_of=deployment)
    return deployment


def test_a_viewer_reads_the_decisions_newest_first_with_their_figures(qwen, charlie):
    decisions.record(qwen, DecisionKind.ROLLOUT, reason="Rolling update started.", outcome="done")
    decisions.record(
        qwen, DecisionKind.SCALE_UP, reason="waiting", figures={"from": 2, "to": 3}, role="decode"
    )
    answer = api_client_for(charlie).get("/api/v1/deployments/qwen/events/")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["deployment"], body["count"], body["next"]) == ("qwen", 2, None)
    newest, oldest = body["results"]
    assert (newest["kind"], newest["kind_display"], newest["role"]) == ("scale_up", "Scale up", "decode")
    assert newest["figures"] == {"from": 2, "to": 3}
    assert (newest["actor"], newest["outcome"], newest["settled"]) == ("leader", "pending", None)
    assert (oldest["kind"], oldest["outcome_display"]) == ("rollout", "Done")


def test_the_reason_in_the_requests_language_and_its_parts(qwen, charlie):
    parts = reasons.gave_up("The engine process exited.", 5)
    decisions.record(qwen, DecisionKind.GAVE_UP, reason=parts, outcome="failed")
    url = f"/api/v1/deployments/{qwen.pk}/events/"
    event = api_client_for(charlie).get(url, HTTP_ACCEPT_LANGUAGE="zh-hans").json()["results"][0]
    assert event["reason"] == "The engine process exited. Gave up after 5 failed restarts."
    assert "重启失败 5 次后已放弃。" in event["reason_display"]
    assert (event["kind_display"], event["outcome_display"]) == ("已放弃", "失败")
    assert event["reason_parts"][-1] == {"text": "Gave up after {n} failed restarts.", "params": {"n": 5}}


def test_filters_by_kind_and_role_and_pages(qwen, bob):
    for number in range(5):
        decisions.record(qwen, DecisionKind.SCALE_REFUSED, reason=f"no room {number}", role="prefill")
    decisions.record(qwen, DecisionKind.RESTART, reason="exited")
    client = api_client_for(bob)
    restarts = client.get("/api/v1/deployments/qwen/events/?kind=restart").json()
    assert [event["reason"] for event in restarts["results"]] == ["exited"]
    plain = client.get("/api/v1/deployments/qwen/events/?role=").json()
    assert plain["count"] == 1
    page = client.get("/api/v1/deployments/qwen/events/?role=prefill&page_size=2&page=2").json()
    assert [event["reason"] for event in page["results"]] == ["no room 2", "no room 1"]
    assert page["count"] == 5
    assert "page=3" in page["next"]
    assert "page_size=2" in page["previous"]


def test_a_replicas_events_are_its_primarys(qwen, charlie):
    decisions.record(qwen, DecisionKind.RESTART, reason="exited")
    body = api_client_for(charlie).get("/api/v1/deployments/qwen-r2/events/").json()
    assert (body["deployment"], body["count"]) == ("qwen", 1)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("kind=scale_sideways", "kind"),
        ("role=mixed", "role"),
        ("page_size=0", "page_size"),
        ("since=1", "since"),
    ],
)
def test_bad_queries_are_refused_naming_the_parameter(qwen, charlie, query, field):
    answer = api_client_for(charlie).get(f"/api/v1/deployments/qwen/events/?{query}")
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["errors"]


def test_whoever_cannot_see_the_deployment_gets_nothing(qwen, world):
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    nobody = get_user_model().objects.create_user("nobody", password="x")  # signed in, no role
    assert api_client_for(nobody).get("/api/v1/deployments/qwen/events/").status_code in (403, 404)
    assert APIClient().get("/api/v1/deployments/qwen/events/").status_code == 401
    assert api_client_for(world["charlie"]).get("/api/v1/deployments/nope/events/").status_code == 404


def test_the_pages_decisions_card_in_the_viewers_language(qwen, charlie):
    from django.test import Client

    parts = reasons.gave_up("", 3)
    decisions.record(
        qwen, DecisionKind.GAVE_UP, reason=parts, figures={"failed_restarts": 3}, outcome="failed"
    )
    browser = Client()
    assert browser.get("/deployments/qwen/decisions/").status_code == 302  # to the sign-in page
    browser.force_login(charlie)
    card = browser.get("/deployments/qwen-r2/decisions/", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert card.status_code == 200
    text = card.content.decode()
    assert 'data-primary="qwen"' in text  # a replica's page follows its primary's decisions
    assert "重启失败 3 次后已放弃。" in text
    assert "failed_restarts=3" in text
    assert browser.get("/deployments/nope/decisions/").status_code == 404
