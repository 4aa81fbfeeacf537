"""`?watch=true` as SSE clients ask for it (`Accept: text/event-stream`) on lists and details alike, and
resumable: a client reconnecting with `Last-Event-ID` gets what changed while it was away, and only that."""

import json

import httpx
import pytest

from panel.accounts.models import ApiToken
from panel.catalog.models import Model
from panel.core.domain.choices import DeploymentState
from panel.deployments.models import Deployment

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

SSE = {"Accept": "text/event-stream"}


def snapshot(url: str, token: str, path: str, last_event_id: str | None = None, **params):
    """(status, content type, [(id, event, data)]) of a watch, read until its first keepalive: what it sends
    before that is what it had to say on connecting."""
    headers = {**SSE, "Authorization": f"Bearer {token}"}
    if last_event_id:
        headers["Last-Event-ID"] = last_event_id
    events, current = [], {}
    with (
        httpx.Client(base_url=url, headers=headers, timeout=20) as client,
        client.stream("GET", path, params={"watch": "true", **params}) as response,
    ):
        kind = response.headers.get("content-type", "")
        if not kind.startswith("text/event-stream"):
            response.read()
            return response.status_code, kind, response.text
        for line in response.iter_lines():
            if line.startswith(": keepalive"):
                break
            if not line:
                if "data" in current:
                    events.append((current.get("id"), current.get("event"), json.loads(current["data"])))
                current = {}
                continue
            field, _, value = line.partition(":")
            current[field] = value.removeprefix(" ")
    return response.status_code, kind, events


@pytest.fixture
def deployments():
    model = Model.objects.create(name="m")
    return {
        name: Deployment.objects.create(name=name, model=model, observed_state=DeploymentState.RUNNING)
        for name in ("alpha", "beta", "gamma")
    }


@pytest.fixture
def charlie_token(charlie):
    return ApiToken.issue(charlie, "watch")[1]


def test_an_event_stream_accepting_client_gets_the_stream_on_a_list_and_on_a_detail(
    live_web,
    deployments,
    charlie_token,
):
    status, kind, events = snapshot(live_web.url, charlie_token, "/api/v1/deployments/")
    assert (status, kind.split(";")[0]) == (200, "text/event-stream")
    assert sorted(data["name"] for _id, _event, data in events) == ["alpha", "beta", "gamma"]
    detail = f"/api/v1/deployments/{deployments['beta'].name}/"
    status, kind, events = snapshot(live_web.url, charlie_token, detail)
    assert (status, kind.split(";")[0]) == (200, "text/event-stream")
    assert [(event, data["name"]) for _id, event, data in events] == [("deployment", "beta")]


def test_an_event_stream_without_watch_is_a_json_406_naming_the_parameter(
    live_web,
    deployments,
    charlie_token,
):
    response = httpx.get(
        f"{live_web.url}/api/v1/deployments/", headers={**SSE, "Authorization": f"Bearer {charlie_token}"}
    )
    assert response.status_code == 406
    assert "?watch=true" in response.json()["detail"]


def test_a_reconnect_with_last_event_id_gets_only_what_changed_meanwhile(
    live_web,
    deployments,
    charlie_token,
):
    _status, _kind, first = snapshot(live_web.url, charlie_token, "/api/v1/deployments/")
    ids = [event_id for event_id, _event, _data in first]
    assert all(ids)
    assert len(set(ids)) == 3
    last = ids[-1]
    # While the client is away: alpha changes, beta goes, delta comes; gamma stays as it was.
    Deployment.objects.filter(name="alpha").update(observed_state=DeploymentState.STOPPED)
    Deployment.objects.filter(name="beta").delete()
    Deployment.objects.create(name="delta", model=deployments["alpha"].model)

    _status, _kind, resumed = snapshot(
        live_web.url, charlie_token, "/api/v1/deployments/", last_event_id=last
    )
    seen = sorted((event, data["name"]) for _id, event, data in resumed)
    assert seen == [("deleted", "beta"), ("deployment", "alpha"), ("deployment", "delta")]
    # The same stream goes on: its numbers continue from the last one sent.
    stream, number = last.rsplit("-", 1)
    assert all(event_id.startswith(stream + "-") for event_id, _e, _d in resumed)
    assert min(int(event_id.rsplit("-", 1)[1]) for event_id, _e, _d in resumed) > int(number)

    # Nothing changed since: a reconnect gets nothing but the keepalive.
    _status, _kind, again = snapshot(
        live_web.url, charlie_token, "/api/v1/deployments/", last_event_id=resumed[-1][0]
    )
    assert again == []


def test_an_event_sent_after_the_last_id_the_client_saw_is_sent_again(
    live_web,
    deployments,
    charlie_token,
):
    _status, _kind, first = snapshot(live_web.url, charlie_token, "/api/v1/deployments/")
    # The client saw only the first event of three before the connection broke.
    _status, _kind, resumed = snapshot(
        live_web.url, charlie_token, "/api/v1/deployments/", last_event_id=first[0][0]
    )
    assert sorted(data["name"] for _id, _e, data in resumed) == sorted(
        data["name"] for _i, _e, data in first[1:]
    )


def test_another_viewer_or_other_filters_cannot_resume_a_stream(
    live_web,
    deployments,
    charlie_token,
    bob,
):
    _status, _kind, first = snapshot(live_web.url, charlie_token, "/api/v1/deployments/")
    Deployment.objects.filter(name="beta").delete()
    bob_token = ApiToken.issue(bob, "watch")[1]
    _status, _kind, other = snapshot(
        live_web.url, bob_token, "/api/v1/deployments/", last_event_id=first[-1][0]
    )
    # Bob's stream starts afresh: the objects as they are, no `deleted` learnt from charlie's ledger.
    assert sorted((event, data["name"]) for _id, event, data in other) == [
        ("deployment", "alpha"),
        ("deployment", "gamma"),
    ]
    _status, _kind, filtered = snapshot(
        live_web.url, charlie_token, "/api/v1/deployments/", last_event_id=first[-1][0], status="running"
    )
    assert all(event == "deployment" for _id, event, _data in filtered)
