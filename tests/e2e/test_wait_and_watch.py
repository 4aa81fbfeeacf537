"""Waiting and watching against a real web server (tests/live_web.py), the in-process Celery worker and the
simulated A2 host: `?wait=` answers when the deployment runs, stops or is gone, 409 with the evidence when a
start fails, 408 when time runs out, and holds no thread of the server while it waits; `?watch=true` streams
the objects and then each change; the websocket opens with a token and no Origin, never with a cookie and no
Origin."""

import concurrent.futures
import json
import queue
import re
import threading
import time

import httpx
import pytest
import redis
from asgiref.sync import async_to_sync
from django.db import transaction
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

import panel.deployments.tasks  # noqa: F401  registers the panel's probe ingest on the shared app
from panel.accounts.models import ApiToken
from panel.audit import actions as audit
from panel.audit.models import AuditEntry
from panel.catalog.models import Model
from panel.core.domain.choices import DeploymentState, DesiredState
from panel.deployments import services
from panel.deployments.models import Deployment
from panel.realtime.broadcast import DEPLOYMENTS, FLEET, abroadcast
from tests.deployment_helpers import wait_for
from tests.integration.conftest import TEST_NODE, event_batch, ingest_as_its_node
from workers.task_names import AGENT_INVENTORY

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


def token_of(user) -> str:
    return ApiToken.issue(user, "ci")[1]


@pytest.fixture
def api(live_web, bob):
    headers = {"Authorization": f"Token {token_of(bob)}"}
    with httpx.Client(base_url=live_web.url, headers=headers, timeout=90) as client:
        yield client


@pytest.fixture
def tiny(tiny_model):
    model, folder = tiny_model
    return {"model": model.pk, "path": str(folder)}


def spec(tiny, name, npu=0) -> dict:
    return {"name": name, **tiny, "nodes": [{"node": TEST_NODE, "npus": [npu]}]}


def live_holders(root):
    from workers.sim import state as sim_state

    return sim_state.live_holders(sim_state.load(root))


def test_waits_answer_once_it_runs_stops_runs_again_restarts_and_is_gone(
    api,
    celery_worker,
    node_with_npus,
    tiny,
    monkeypatch,
    reconcile_loop,
):
    monkeypatch.setenv("SIM_ENGINE_START_DELAY", "0.5")
    created = api.post(
        "/api/v1/deployments/", params={"wait": "running", "timeout": 60}, json=spec(tiny, "w")
    )
    assert created.status_code == 200, created.text
    body = created.json()
    assert body["status"] == "running"
    assert "warnings" in body  # create's own answer, its deployment read again
    pk, first_pid = body["id"], body["runtime"]["nodes"][TEST_NODE]["pid"]
    assert [holder["pid"] for holder in live_holders(celery_worker.sim_root)] == [first_pid]
    # The audit middleware, async under the ASGI server, still hands the request to the service that records.
    created_entry = AuditEntry.objects.get(action=audit.DEPLOYMENT_CREATED, target="w")
    assert (created_entry.actor_name, created_entry.ip) == ("bob", "127.0.0.1")

    stopped = api.post(f"/api/v1/deployments/{pk}/stop/", params={"wait": "stopped", "timeout": 60})
    assert stopped.status_code == 200, stopped.text
    assert (stopped.json()["status"], stopped.json()["desired_state"]) == ("stopped", "stopped")
    assert live_holders(celery_worker.sim_root) == []

    started = api.post(f"/api/v1/deployments/{pk}/start/", params={"wait": "running", "timeout": 60})
    assert started.status_code == 200, started.text
    assert started.json()["status"] == "running"

    # A restart rolls (a surge replica first, moved on by the reconcile loop) and passes through stopped on
    # its way back to running: that is not where it stops waiting, the rollout's end is.
    restarted = api.post(f"/api/v1/deployments/{pk}/restart/", params={"wait": "running", "timeout": 60})
    assert restarted.status_code == 200, restarted.text
    assert restarted.json()["status"] == "running"
    assert restarted.json()["restart_count"] == 1
    assert (
        restarted.json()["runtime"]["nodes"][TEST_NODE]["pid"]
        != started.json()["runtime"]["nodes"][TEST_NODE]["pid"]
    )

    deleted = api.delete(f"/api/v1/deployments/{pk}/", params={"wait": "deleted", "timeout": 60})
    assert (deleted.status_code, deleted.json()) == (200, {"deleted": True, "name": "w"})
    assert api.get(f"/api/v1/deployments/{pk}/").status_code == 404
    assert live_holders(celery_worker.sim_root) == []


def test_a_start_that_fails_answers_409_with_its_reason_findings_and_log_tail(
    api, celery_worker, node_with_npus, tiny
):
    from workers.sim import state as sim_state

    sim_state.set_driver_unloaded(celery_worker.sim_root)
    answer = api.post("/api/v1/deployments/", params={"wait": "running"}, json=spec(tiny, "no-driver"))
    assert answer.status_code == 409, answer.text
    body = answer.json()
    assert body["deployment"]["status"] == "unhealthy"
    assert body["detail"].startswith("no-driver did not reach running: it is unhealthy. ")
    assert "exited during start-up" in body["detail"]
    assert any("-8005" in line for line in body["log_tail"]), body["log_tail"]
    assert body["findings"] == body["deployment"]["findings"]["findings"]
    # Stopped, so that no retry after the back-off starts an engine once this test has ended.
    assert api.post(f"/api/v1/deployments/{body['deployment']['id']}/stop/").status_code == 202


@pytest.mark.usefixtures("reconcile_loop")
def test_a_wait_that_runs_out_answers_408_and_a_delete_waits_until_the_row_is_gone(
    api, celery_worker, node_with_npus, tiny, monkeypatch
):
    monkeypatch.setenv("SIM_ENGINE_START_DELAY", "30")
    began = time.monotonic()
    answer = api.post(
        "/api/v1/deployments/", params={"wait": "running", "timeout": 2}, json=spec(tiny, "slow")
    )
    took = time.monotonic() - began
    assert answer.status_code == 408, answer.text
    assert answer.json()["detail"] == "slow did not reach running within 2 s (it is starting)."
    assert answer.json()["deployment"]["status"] == "starting"
    assert 2 <= took < 10

    pk = answer.json()["deployment"]["id"]
    deleted = api.delete(f"/api/v1/deployments/{pk}/", params={"wait": "deleted", "timeout": 90})
    assert (deleted.status_code, deleted.json()) == (200, {"deleted": True, "name": "slow"})
    assert not Deployment.objects.filter(pk=pk).exists()


def test_wait_and_watch_parameters_are_checked_before_anything_acts(api, live_web):
    model = Model.objects.create(name="m")
    kept = Deployment.objects.create(
        name="kept", model=model, observed_state=DeploymentState.STOPPED, desired_state=DesiredState.STOPPED
    )
    body = {"name": "never", "model": model.pk, "nodes": [{"node": TEST_NODE, "npus": [0]}]}
    for params, field, words in (
        ({"wait": "sideways"}, "wait", "not a valid choice"),
        ({"wait": "running", "timeout": "-1"}, "timeout", "greater than or equal to 0"),
        ({"wait": "running", "timeout": "3601"}, "timeout", "less than or equal to 3600"),
        ({"wait": "running", "timeout": "soon"}, "timeout", "valid number"),
        ({"timeout": "5"}, "timeout", "timeout goes with wait"),
    ):
        answer = api.post("/api/v1/deployments/", params=params, json=body)
        assert answer.status_code == 400, (params, answer.text)
        assert words in answer.json()["errors"][field][0], answer.json()
    assert list(Deployment.objects.values_list("name", flat=True)) == ["kept"]

    refused = api.delete(f"/api/v1/deployments/{kept.pk}/", params={"wait": "running"})
    assert refused.status_code == 400
    assert "wait" in refused.json()["errors"]
    assert Deployment.objects.get(pk=kept.pk).desired_state == DesiredState.STOPPED

    assert api.get("/api/v1/deployments/", params={"watch": "maybe"}).status_code == 400
    anonymous = httpx.get(f"{live_web.url}/api/v1/deployments/", params={"watch": "true"})
    assert anonymous.status_code == 401
    assert anonymous.headers["content-type"] == "application/json"


def test_the_async_middleware_chain_serves_pages_static_files_and_refusals(live_web):
    """Every middleware runs async under the ASGI server (panel/core/web/middleware.py): what each one does
    still happens there."""
    static = httpx.get(f"{live_web.url}/static/favicon.svg")
    assert static.status_code == 200
    assert static.headers["content-type"].startswith("image/svg+xml")
    page = httpx.get(f"{live_web.url}/accounts/login/")
    assert page.status_code == 200
    assert page.headers["x-frame-options"] == "DENY"
    nul = httpx.get(f"{live_web.url}/api/v1/deployments/", params={"name": "a\x00b"})
    assert nul.status_code == 400
    assert nul.json()["detail"] == "Query parameters must not contain NUL characters."


def test_waiting_requests_hold_no_thread_of_the_server(live_web, bob):
    """Forty requests wait at once; the server's thread count stays where it was, and all forty answer when
    their timeout ends, not one after another."""
    model = Model.objects.create(name="m")
    idle = Deployment.objects.create(
        name="idle", model=model, observed_state=DeploymentState.STOPPED, desired_state=DesiredState.STOPPED
    )
    headers = {"Authorization": f"Token {token_of(bob)}"}
    waiters, timeout = 40, 8
    client = httpx.Client(
        base_url=live_web.url, headers=headers, timeout=60, limits=httpx.Limits(max_connections=waiters)
    )

    def stop_and_wait_for_deleted(wait_s):
        # Already stopped: the stop does nothing, and the wait for `deleted` lasts its whole timeout.
        return client.post(
            f"/api/v1/deployments/{idle.pk}/stop/", params={"wait": "deleted", "timeout": wait_s}
        )

    with client, concurrent.futures.ThreadPoolExecutor(waiters) as pool:
        assert stop_and_wait_for_deleted(0.5).status_code == 408  # warm: Redis connections, the shared pool
        before = live_web.thread_count()
        began = time.monotonic()
        answers = [pool.submit(stop_and_wait_for_deleted, timeout) for _ in range(waiters)]
        time.sleep(timeout / 2)  # every stop done, every request waiting
        during = []
        while time.monotonic() - began < timeout - 1:
            during.append(live_web.thread_count())
            time.sleep(0.2)
        statuses = [answer.result().status_code for answer in answers]
        took = time.monotonic() - began
    assert statuses == [408] * waiters
    # One after another they would take waiters x timeout; at once, one timeout plus what a loaded 2-core
    # machine adds (16.9 s was seen at load 29, so the bound leaves room for that and no more).
    assert took < 3 * timeout, f"{waiters} waits of {timeout} s took {took:.1f} s"
    assert during, f"no sample: {time.monotonic() - began:.1f} s"
    assert max(during) - before < 10, (before, during)


class EventStream:
    """A text/event-stream response read on a thread of its own: ("event name", data) and ("comment", text)
    items arrive in a queue; ("closed", None) when the server ends it."""

    def __init__(self, url: str, token: str, params: dict):
        self.client = httpx.Client(timeout=httpx.Timeout(10, read=None))
        request = self.client.build_request(
            "GET", url, params=params, headers={"Authorization": f"Token {token}"}
        )
        self.response = self.client.send(request, stream=True)
        self.items: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        name, data = None, []
        try:
            for line in self.response.iter_lines():
                if line.startswith(":"):
                    self.items.put(("comment", line[1:].strip()))
                elif line.startswith("event:"):
                    name = line.removeprefix("event:").strip()
                elif line.startswith("data:"):
                    data.append(line.removeprefix("data:").strip())
                elif not line and data:
                    self.items.put((name or "message", json.loads("\n".join(data))))
                    name, data = None, []
        except httpx.HTTPError:
            pass  # closed by the test
        finally:
            self.items.put(("closed", None))

    def next_event(self, timeout: float = 15) -> tuple[str, dict | None]:
        deadline = time.monotonic() + timeout
        while True:
            kind, data = self.items.get(timeout=max(0.01, deadline - time.monotonic()))
            if kind != "comment":
                return kind, data

    def comments(self, timeout: float) -> list[str]:
        seen, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                kind, data = self.items.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if kind == "comment":
                seen.append(data)
        return seen

    def close(self) -> None:
        self.response.close()
        self.client.close()


def group_members(redis_url: str, prefix: str, group: str) -> int:
    return redis.Redis.from_url(redis_url).zcard(f"asgi-{prefix}:group:{group}")


def test_a_watched_list_streams_each_deployment_then_each_change_until_the_client_leaves(
    live_web,
    api,
    charlie,
    redis_url,
    test_prefix,
):
    model = Model.objects.create(name="m")
    running = Deployment.objects.create(name="alpha", model=model, observed_state=DeploymentState.RUNNING)
    Deployment.objects.create(
        name="beta", model=model, observed_state=DeploymentState.STOPPED, desired_state=DesiredState.STOPPED
    )
    stream = EventStream(f"{live_web.url}/api/v1/deployments/", token_of(charlie), {"watch": "true"})
    try:
        assert stream.response.status_code == 200
        assert stream.response.headers["content-type"].startswith("text/event-stream")
        first = [stream.next_event(), stream.next_event()]
        assert [(kind, data["name"], data["status"]) for kind, data in first] == [
            ("deployment", "alpha", "running"),
            ("deployment", "beta", "stopped"),
        ]
        detail = api.get(f"/api/v1/deployments/{running.pk}/").json()  # as the detail endpoint
        # The endpoint is the /v1 base at the address each client used: the stream's is the live server's.
        assert {**first[0][1], "endpoint": ""} == {**detail, "endpoint": ""}
        assert first[0][1]["endpoint"].endswith("/v1")

        # A change through the API: alpha has no engines, so its stop just says stopping.
        assert api.post(f"/api/v1/deployments/{running.pk}/stop/").status_code == 202
        kind, data = stream.next_event()
        assert (kind, data["name"], data["status"], data["desired_state"]) == (
            "deployment",
            "alpha",
            "stopping",
            "stopped",
        )
        # A new deployment, and one that goes away.
        with transaction.atomic():
            new = Deployment.objects.create(name="gamma", model=model)
            services.move(new, DeploymentState.STARTING)
            new.save()
        kind, data = stream.next_event()
        assert (kind, data["name"], data["status"]) == ("deployment", "gamma", "starting")
        with transaction.atomic():
            services.release_and_remove(Deployment.objects.get(name="beta"))
        assert stream.next_event() == ("deleted", {"name": "beta"})
        assert "keepalive" in stream.comments(timeout=3)  # every second on this server
        assert group_members(redis_url, test_prefix, DEPLOYMENTS) == 1
    finally:
        stream.close()
    wait_for(lambda: group_members(redis_url, test_prefix, DEPLOYMENTS) == 0, 10, "the watch to leave")


def test_a_watched_operation_streams_its_progress_and_a_watched_list_sees_new_ones(
    live_web,
    charlie,
):
    from panel.nodes.models import Node
    from panel.operations.services import create_operation

    node = Node.objects.create(name="watch-node", transport="agent")
    # Nobody serves this node's queue: its task waits in Redis, and the test plays the agent's events.
    operation = create_operation(kind="inventory", node=node, task_name=AGENT_INVENTORY)
    token = token_of(charlie)
    detail = EventStream(f"{live_web.url}/api/v1/operations/{operation.pk}/", token, {"watch": "true"})
    listing = EventStream(
        f"{live_web.url}/api/v1/operations/", token, {"watch": "true", "node": "watch-node"}
    )
    try:
        kind, data = detail.next_event()
        assert (kind, data["id"], data["status"]) == ("operation", str(operation.pk), "pending")
        assert listing.next_event()[1]["id"] == str(operation.pk)

        ingest_as_its_node(
            event_batch(
                operation,
                (1, "state", {"state": "running"}),
                (2, "progress", {"percent": 40, "stage": "npu-smi"}),
            )
        )
        kind, data = detail.next_event()
        assert (kind, data["status"], data["progress"], data["stage"]) == (
            "operation",
            "running",
            40.0,
            "npu-smi",
        )
        assert listing.next_event()[1]["status"] == "running"

        second = create_operation(kind="inventory", node=node, task_name=AGENT_INVENTORY)
        kind, data = listing.next_event()
        assert (kind, data["id"], data["status"]) == ("operation", str(second.pk), "pending")
    finally:
        detail.close()
        listing.close()


def test_a_token_opens_the_websocket_without_origin_and_a_cookie_alone_does_not(
    live_web,
    charlie,
):
    from django.test import Client

    endpoint = f"{live_web.ws_url}/ws/"
    token = {"Authorization": f"Token {token_of(charlie)}"}
    with connect(endpoint, additional_headers=token) as socket:  # a script: no Origin header
        socket.send(json.dumps({"type": "subscribe", "groups": [FLEET]}))
        assert json.loads(socket.recv(timeout=10))["groups"] == [FLEET]
        async_to_sync(abroadcast)(FLEET, {"type": "ping"})
        assert json.loads(socket.recv(timeout=10)) == {"group": FLEET, "type": "ping"}

    browser = Client()
    browser.force_login(charlie)
    cookie = {"Cookie": f"sessionid={browser.cookies['sessionid'].value}"}
    with pytest.raises(InvalidStatus) as refused:
        connect(endpoint, additional_headers=cookie)
    assert refused.value.response.status_code == 403
    with connect(endpoint, additional_headers={**cookie, "Origin": live_web.url}) as socket:  # its page
        socket.send(json.dumps({"type": "subscribe", "groups": [FLEET]}))
        assert json.loads(socket.recv(timeout=10))["groups"] == [FLEET]
    # A token does not excuse a page elsewhere.
    with pytest.raises(InvalidStatus) as foreign:
        connect(endpoint, additional_headers={**token, "Origin": "http://elsewhere.example"})
    assert foreign.value.response.status_code == 403


def test_the_server_leaves_the_client_address_to_the_panel(live_web):
    """uvicorn would believe X-Forwarded-For from a loopback peer; panel.web turns that off, so with
    PANEL_TRUSTED_PROXIES = 0 a failed sign-in is recorded (and locked out) by the address that connected,
    whatever the client wrote in the header. The server does not name itself either."""
    with httpx.Client(base_url=live_web.url) as browser:
        page = browser.get("/accounts/login/")
        assert "server" not in page.headers
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        answer = browser.post(
            "/accounts/login/",
            data={"username": "nobody", "password": "wrong", "csrfmiddlewaretoken": csrf},
            headers={"X-Forwarded-For": "203.0.113.9", "Referer": f"{live_web.url}/accounts/login/"},
        )
    assert answer.status_code == 200  # the form again, with its error
    failed = AuditEntry.objects.get(action=audit.SIGNIN_FAILED)
    assert failed.ip == "127.0.0.1"
