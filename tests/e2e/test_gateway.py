"""The /v1 gateway on a real web server (panel.web) in front of sim engines the panel deployed (API → Celery →
the sim host's agent): routing by served name, least outstanding requests, failover before the first byte, an
instance leaving the pool when its probe fails, scopes, per-key limits and usage rows (streamed and not)."""

import os
import signal
import threading
import time
from collections import Counter
from itertools import pairwise

import httpx
import pytest

import panel.deployments.tasks  # noqa: F401  registers the panel's probe ingest on the shared app
from panel.gateway.instances.pool import SUSPECT_S
from tests.conftest import api_client_for
from tests.deployment_helpers import deployment_json, wait_for
from tests.gateway_helpers import CHAT, chat, deploy, drained, engine_pid, key_for, stream_chat
from tests.integration.conftest import TEST_NODE

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(240),
    pytest.mark.usefixtures("own_ports", "fresh_gateway_state"),
]


@pytest.fixture
def node(node_with_npus, monkeypatch):
    """The shared node with eight NPUs (tests/integration/conftest.py); its engines start quickly."""
    monkeypatch.setenv("SIM_ENGINE_START_DELAY", "0.3")
    return node_with_npus


def test_the_gateway_routes_by_served_name_balances_and_engines_refuse_callers_without_their_key(
    node, tiny_model, bob, gateway, monkeypatch
):
    monkeypatch.setenv("SIM_ENGINE_TOKEN_DELAY", "0.05")  # each answer streams for about a second
    model, folder = tiny_model
    client = api_client_for(bob)
    first = deploy(client, model, folder, "chat-a", "chat", TEST_NODE, [0])
    deploy(client, model, folder, "chat-b", "chat", TEST_NODE, [1])
    other = deploy(client, model, folder, "other", "other", TEST_NODE, [2])
    assert first["endpoint"].endswith("/v1")
    assert first["served_model_name"] == "chat"

    # The engine itself wants the deployment's key: open /health, closed /v1.
    port = other["spec"]["port"]
    assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
    refused = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={"model": "other", **CHAT})
    assert refused.status_code == 401

    key = key_for(bob)
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(stream_chat(gateway, key)[0].status_code))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results == [200] * 8
    answer = chat(gateway, key, model="other")
    assert answer.status_code == 200, answer.text
    assert answer.json()["model"] == "other"

    rows = drained(9)
    per_instance = Counter(row.instance for row in rows if row.model == "chat")
    # Eight streams at once over two instances, least outstanding first: four each.
    assert per_instance == {"chat-a/0": 4, "chat-b/0": 4}
    assert [row.instance for row in rows if row.model == "other"] == ["other/0"]

    missing = chat(gateway, key, model="nope")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"
    with gateway.client(key) as http:
        listed = http.get("/v1/models").json()
        assert {m["id"] for m in listed["data"]} == {"chat", "other"}
        assert http.get("/v1/nope").json()["error"]["code"] == "unknown_url"


def test_a_request_that_fails_before_its_first_byte_is_retried_on_another_instance(
    node, tiny_model, bob, gateway
):
    model, folder = tiny_model
    client = api_client_for(bob)
    dead = deploy(client, model, folder, "chat-a", "chat", TEST_NODE, [0])
    deploy(client, model, folder, "chat-b", "chat", TEST_NODE, [1])
    os.kill(engine_pid(bob, dead), signal.SIGKILL)  # no reconcile loop here: the panel still thinks it runs

    key = key_for(bob)
    for index in range(12):
        response = stream_chat(gateway, key)[0] if index % 2 else chat(gateway, key)
        assert response.status_code == 200, response.text
    rows = drained(12)
    assert {row.instance for row in rows} == {"chat-b/0"}
    retried = sorted(row.time for row in rows if row.attempts == 2)
    # The first request that picked the dead instance went on to the other; the dead one is then avoided for
    # SUSPECT_S (on a loaded machine twelve requests can outlast that, and the next try is again retried).
    assert retried
    assert all((later - earlier).total_seconds() >= SUSPECT_S for earlier, later in pairwise(retried))
    assert all(row.status == 200 for row in rows)


@pytest.mark.usefixtures("reconcile_loop")
def test_an_instance_that_fails_its_probe_leaves_the_pool_and_none_left_is_a_503(
    node, tiny_model, bob, gateway
):
    from panel.deployments.models import Deployment

    model, folder = tiny_model
    client = api_client_for(bob)
    dead = deploy(client, model, folder, "chat-a", "chat", TEST_NODE, [0])
    os.kill(engine_pid(bob, dead), signal.SIGKILL)
    wait_for(lambda: deployment_json(client, dead["id"])["status"] != "running", 20, "the probe to notice")
    key = key_for(bob)
    refused = chat(gateway, key)
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "no_healthy_replica"
    assert refused.headers["Retry-After"]

    # An engine whose /health failed once but that is not known dead, alone: routed to rather than none
    # (panel/gateway/instances/pool.py; one among others that pass is out at once, tests/integration/
    # test_gateway_pool_doubt.py). This one is dead, so the request is refused at connect: still a 503. Or,
    # when the reconcile loop has restarted it meanwhile (it heals an engine that exited), the engine itself
    # answers 503 while it starts, passed on in OpenAI's shape with its status as the code.
    Deployment.objects.filter(pk=dead["id"]).update(observed_state="running", probe_failures=1)
    tried = chat(gateway, key)
    assert tried.status_code == 503
    assert tried.json()["error"]["code"] in ("no_healthy_replica", 503), tried.text


def test_scopes_and_model_lists_decide_what_a_key_reaches(node, tiny_model, bob, charlie, gateway):
    model, folder = tiny_model
    deploy(api_client_for(bob), model, folder, "chat-a", "chat", TEST_NODE, [0])
    deploy_key = key_for(bob, "ci", scopes=["deploy"])
    only_other = key_for(bob, "narrow", allowed_models=["other"])
    inference = key_for(charlie, "viewer-app")

    refused = chat(gateway, deploy_key)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "insufficient_scope"
    narrow = chat(gateway, only_other)
    assert (narrow.status_code, narrow.json()["error"]["code"]) == (403, "model_not_allowed")
    with gateway.client(only_other) as http:
        assert http.get("/v1/models").json()["data"] == []
    bad = chat(gateway, "ap_not-a-key")
    assert (bad.status_code, bad.json()["error"]["type"]) == (401, "invalid_request_error")
    assert chat(gateway, inference).status_code == 200  # a viewer may call the models

    with gateway.client(inference) as panel_api:
        assert panel_api.get("/api/v1/nodes/").status_code == 403  # inference keys stay on /v1
    with gateway.client(deploy_key) as panel_api:
        assert panel_api.get("/api/v1/deployments/").status_code == 200
        assert panel_api.get("/api/v1/tokens/").status_code == 403  # deploy keys hand out no credentials

    # Keys are kept in Redis for a few seconds; revoking one (or taking its owner's role) drops it at once.
    from django.contrib.auth.models import Group

    from panel.accounts.models import ApiToken
    from panel.accounts.services import revoke_token

    charlie.groups.remove(Group.objects.get(name="viewer"))
    assert (chat(gateway, inference).status_code, chat(gateway, inference).json()["error"]["code"]) == (
        403,
        "no_role",
    )
    revoke_token(ApiToken.objects.get(name="viewer-app"))
    assert chat(gateway, inference).status_code == 401


def test_an_address_sending_unknown_keys_is_refused_before_they_are_looked_up(node, tiny_model, bob, gateway):
    model, folder = tiny_model
    deploy(api_client_for(bob), model, folder, "chat-a", "chat", TEST_NODE, [0])
    known = key_for(bob)
    _wait_for_a_fresh_minute(margin_s=10)
    assert chat(gateway, known).status_code == 200
    limit = 30  # PANEL_GATEWAY_BAD_KEYS_PER_MINUTE's default, which the live gateway runs with
    assert {chat(gateway, f"ap_guess-{i}").status_code for i in range(limit)} == {401}
    refused = chat(gateway, "ap_guess-next")
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "too_many_unknown_keys"
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert chat(gateway, known).status_code == 200  # a key that called recently is not the guesser
    assert chat(gateway, key_for(bob, "new-app")).status_code == 429  # unseen keys wait out the minute


def _wait_for_a_fresh_minute(margin_s: float = 15) -> None:
    """Limits count per clock minute: start where the minute will not turn during the test."""
    left = 60 - time.time() % 60
    if left < margin_s:
        time.sleep(left + 0.2)


def test_per_key_limits_answer_429_with_retry_after(node, tiny_model, bob, gateway):
    model, folder = tiny_model
    deploy(api_client_for(bob), model, folder, "chat-a", "chat", TEST_NODE, [0])
    by_requests = key_for(bob, "two-a-minute", requests_per_minute=2)
    by_tokens = key_for(bob, "few-tokens", tokens_per_minute=10)
    _wait_for_a_fresh_minute()

    assert [chat(gateway, by_requests).status_code for _ in range(2)] == [200, 200]
    over = chat(gateway, by_requests)
    assert over.status_code == 429
    assert over.json()["error"] == {
        "message": over.json()["error"]["message"],
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
    assert 1 <= int(over.headers["Retry-After"]) <= 60

    used = chat(gateway, by_tokens)  # prompt + 6 completion tokens: past 10
    assert used.status_code == 200
    assert used.json()["usage"]["total_tokens"] > 10
    spent = chat(gateway, by_tokens)
    assert (spent.status_code, spent.json()["error"]["type"]) == (429, "tokens")
    rows = drained(5)
    assert sorted(row.status for row in rows) == [200, 200, 200, 429, 429]


def test_usage_records_the_engines_token_counts_streamed_or_not(node, tiny_model, bob, alice, gateway):
    from panel.gateway.models import UsageHour

    model, folder = tiny_model
    deploy(api_client_for(bob), model, folder, "chat-a", "chat", TEST_NODE, [0])
    key = key_for(bob)

    whole = chat(gateway, key)
    assert whole.status_code == 200
    plain, events = stream_chat(gateway, key)
    assert plain.status_code == 200
    assert plain.headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "[DONE]"
    assert not any(isinstance(e, dict) and "usage" in e for e in events)  # the client did not ask for it
    asked, asked_events = stream_chat(gateway, key, stream_options={"include_usage": True})
    usage_chunks = [e for e in asked_events if isinstance(e, dict) and e.get("usage")]
    assert len(usage_chunks) == 1
    assert usage_chunks[0]["choices"] == []

    rows = {row.request_id: row for row in drained(3)}
    by_id = {response.headers["X-Request-Id"]: response for response in (whole, plain, asked)}
    assert set(rows) == set(by_id)
    engine_usage = whole.json()["usage"]
    row = rows[whole.headers["X-Request-Id"]]
    assert (row.prompt_tokens, row.completion_tokens) == (
        engine_usage["prompt_tokens"],
        engine_usage["completion_tokens"],
    )
    assert (row.key, row.user, row.model, row.deployment_name, row.instance, row.status, row.stream) == (
        "bob/app",
        bob,
        "chat",
        "chat-a",
        "chat-a/0",
        200,
        False,
    )
    assert row.ttft_ms is None
    assert row.duration_ms > 0
    streamed = rows[plain.headers["X-Request-Id"]]
    assert (streamed.prompt_tokens, streamed.completion_tokens) == (row.prompt_tokens, row.completion_tokens)
    assert streamed.stream
    assert 0 < streamed.ttft_ms <= streamed.duration_ms
    asked_row = rows[asked.headers["X-Request-Id"]]
    assert asked_row.completion_tokens == usage_chunks[0]["usage"]["completion_tokens"]

    hour = UsageHour.objects.get()
    assert (hour.requests, hour.errors, hour.completion_tokens) == (3, 0, 3 * row.completion_tokens)
    from panel.accounts.models import ApiToken

    assert ApiToken.objects.get(name="app").last_used is not None

    api = api_client_for(alice)
    listed = api.get("/api/v1/usage/", {"model": "chat"}).json()
    assert listed["count"] == 3
    assert api_client_for(bob).get("/api/v1/usage-hourly/").json()["results"][0]["requests"] == 3
    from django.test import Client

    browser = Client()
    browser.force_login(alice)
    page = browser.get("/usage/").content.decode()
    assert "bob/app" in page
    assert 'data-testid="chart-models"' in page
    csv = b"".join(browser.get("/usage/export.csv?range=7d").streaming_content).decode().splitlines()
    assert csv[0].startswith("hour,key,model")
    assert ",bob/app,chat,chat-a,3,0," in csv[1]

    metrics = httpx.get(f"{gateway.url}/metrics").text
    metrics = [line for line in metrics.splitlines() if line.startswith("panel_gateway")]
    assert 'panel_gateway_requests_total{key="bob/app",model="chat",status="200"} 3.0' in metrics
    completion = 3 * row.completion_tokens
    assert (
        f'panel_gateway_tokens_total{{key="bob/app",kind="completion",model="chat"}} {completion}.0'
        in metrics
    )
    assert 'panel_gateway_ttft_seconds_count{model="chat"} 2.0' in metrics


def test_the_openai_sdk_works_against_the_panel(node, tiny_model, bob, gateway):
    import openai

    model, folder = tiny_model
    deploy(api_client_for(bob), model, folder, "chat-a", "chat", TEST_NODE, [0])
    key = key_for(bob, requests_per_minute=1000)
    sdk = openai.OpenAI(base_url=gateway.v1, api_key=key, max_retries=0)

    assert [m.id for m in sdk.models.list()] == ["chat"]
    answer = sdk.chat.completions.create(model="chat", **CHAT)
    assert answer.choices[0].message.content
    assert answer.usage.completion_tokens == 6
    pieces = [
        chunk.choices[0].delta.content or ""
        for chunk in sdk.chat.completions.create(model="chat", stream=True, **CHAT)
        if chunk.choices
    ]
    assert "".join(pieces) == answer.choices[0].message.content
    with_usage = list(
        sdk.chat.completions.create(model="chat", stream=True, stream_options={"include_usage": True}, **CHAT)
    )
    assert with_usage[-1].usage.completion_tokens == 6
    assert sdk.completions.create(model="chat", prompt="Once upon", max_tokens=3).choices[0].text
    vectors = sdk.embeddings.create(model="chat", input=["a", "b"])
    assert [item.index for item in vectors.data] == [0, 1]

    with pytest.raises(openai.NotFoundError):
        sdk.chat.completions.create(model="missing", **CHAT)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=gateway.v1, api_key="ap_wrong", max_retries=0).models.list()
    rows = drained(6)  # five answers and the 404 (a key that is not one leaves no row)
    assert len(rows) == 6
    assert {row.endpoint for row in rows} == {"chat/completions", "completions", "embeddings"}
    assert next(row for row in rows if row.endpoint == "embeddings").prompt_tokens == 2


def test_a_client_that_leaves_mid_stream_ends_the_engine_request_and_is_recorded(
    node, tiny_model, bob, gateway, monkeypatch
):
    from panel.gateway.instances.pool import outstanding

    monkeypatch.setenv("SIM_ENGINE_TOKEN_DELAY", "0.05")
    model, folder = tiny_model
    deploy(api_client_for(bob), model, folder, "chat-a", "chat", TEST_NODE, [0])
    key = key_for(bob)
    body = {"model": "chat", **CHAT, "max_tokens": 200, "ignore_eos": True, "stream": True}
    with gateway.client(key) as http, http.stream("POST", "/v1/chat/completions", json=body) as response:
        lines = response.iter_lines()
        assert [next(lines) for _ in range(3)][0].startswith("data: ")
        assert outstanding("chat-a/0") == 1
    (row,) = drained(1)
    assert (row.status, row.error, row.instance) == (499, "client_closed", "chat-a/0")
    assert row.duration_ms < 5000  # not the 10 s the whole answer takes
    assert outstanding("chat-a/0") == 0

    # Waiting for a whole answer, the same: the client's going ends the engine request.
    with gateway.client(key, timeout=1) as http, pytest.raises(httpx.ReadTimeout):
        http.post("/v1/chat/completions", json={**body, "stream": False})
    waited = wait_for(lambda: len(rows := drained(2, timeout=1)) == 2 and rows, 10, "the second record")
    assert (waited[0].status, waited[0].stream) == (499, False)
    assert outstanding("chat-a/0") == 0


def test_a_pool_entry_rewritten_in_redis_sends_no_prompt_to_the_attackers_server(
    node, tiny_model, bob, gateway
):
    """The attack of issue 22 end to end: the pool entry the web server cached is rewritten to name the
    attacker's server. The web server refuses the entry (it carries no seal of the panel's), routes by the
    database, and the attacker receives nothing."""
    import http.server

    from panel.deployments.models import Deployment
    from panel.gateway import store
    from panel.gateway.access.identity import pool_key

    received = []

    class Attacker(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(self.headers.get("Authorization"))
            self.send_response(500)
            self.end_headers()

    server = http.server.HTTPServer(("127.0.0.1", 0), Attacker)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    model, folder = tiny_model
    deploy(api_client_for(bob), model, folder, "chat-a", "chat", TEST_NODE, [0])
    key = key_for(bob)
    assert chat(gateway, key).status_code == 200
    sealed = store.client().get(pool_key("chat"))
    entry = sealed.partition(".")[2]  # the JSON after the panel's MAC
    engine_port = Deployment.objects.get(name="chat-a").spec["port"]
    forged = entry.replace(f"127.0.0.1:{engine_port}/", f"127.0.0.1:{server.server_port}/")
    assert forged != entry
    try:
        store.client().set(pool_key("chat"), forged, ex=60)
        answer = chat(gateway, key)
    finally:
        server.shutdown()
    assert answer.status_code == 200, answer.text
    assert received == []
