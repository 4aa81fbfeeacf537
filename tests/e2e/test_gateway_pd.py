"""The gateway as the PD proxy (panel/gateway/proxy/pd.py), on the real web server and sim engines that play
prefill and decode over TCP (workers/sim/engine_kv.py): prefill first with kv_transfer_params asking for a
remote decode, then decode with the params the prefill returned; a failing prefill or a decode failing
before its first byte is retried elsewhere; a stream cut mid-way ends with an OpenAI-shaped error; params
a client sends, or that do not hold up, never reach a decode."""

import re
import signal
import time

import httpx
import pytest

from panel.gateway import store
from tests.gateway_helpers import drained, key_for, sse_events
from tests.sim_engine_process import stop

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]
LONG = " ".join(f"word{i}" for i in range(200))  # 200 prompt tokens: several KV blocks of 16


def busy(*instance_ids):
    """Make instances look loaded, so the least-loaded pick takes the others first."""
    now = time.time()
    for instance_id in instance_ids:
        store.client().zadd(store.inflight_key(instance_id), {f"busy-{i}": now for i in range(3)})


def hits(port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    found = re.search(r"^vllm:prefix_cache_hits_total(?:\{[^}]*\})? ([0-9.e+]+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def direct_chat(port: int, content: str) -> None:
    body = {"model": "qwen", "messages": [{"role": "user", "content": content}], "max_tokens": 2}
    assert (
        httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=30).status_code == 200
    )


def ask(gateway, key, content=LONG, **extra):
    with gateway.client(key) as client:
        body = {"model": "qwen", "messages": [{"role": "user", "content": content}], "max_tokens": 6, **extra}
        return client.post("/v1/chat/completions", json=body)


def test_a_request_is_prefilled_then_decoded_with_the_kv_the_prefill_computed(live_gateway, pd_engines, bob):
    key = key_for(bob)
    busy("qwen-pd-r2/0", "qwen-pd-d2/0")
    answer = ask(live_gateway, key)
    assert answer.status_code == 200, answer.text
    assert (
        answer.json()["usage"]["completion_tokens"] == 6
    )  # the decode's answer, not the prefill's one token
    row = drained(1)[0]
    assert (row.instance, row.status, row.attempts) == ("qwen-pd-d1/0", 200, 2)
    assert row.prompt_tokens >= 200
    # The blocks the prefill computed were pulled into qwen-pd-d1's cache: the same prompt sent to it
    # directly now hits its prefix cache (it never computed that prompt itself).
    port = pd_engines["qwen-pd-d1"][2]
    before = hits(port)
    direct_chat(port, LONG)
    assert hits(port) > before

    streamed = ask(live_gateway, key, stream=True)
    assert streamed.status_code == 200
    events = sse_events(streamed.text)
    assert events[-1] == "[DONE]"
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1] if e.get("choices"))


def test_a_failing_prefill_is_retried_on_another_prefill(live_gateway, pd_engines, bob):
    key = key_for(bob)
    dead = pd_engines["qwen-pd"][1]
    dead.send_signal(signal.SIGKILL)
    dead.wait(10)
    busy("qwen-pd-r2/0")  # the dead prefill is picked first
    answer = ask(live_gateway, key)
    assert answer.status_code == 200, answer.text
    row = drained(1)[0]
    assert (row.status, row.attempts) == (200, 3)  # dead prefill, the other prefill, a decode


def test_a_decode_failing_before_its_first_byte_is_retried_on_another_decode(live_gateway, pd_engines, bob):
    key = key_for(bob)
    dead = pd_engines["qwen-pd-d1"][1]
    dead.send_signal(signal.SIGKILL)
    dead.wait(10)
    busy("qwen-pd-d2/0")
    answer = ask(live_gateway, key, stream=True)
    assert answer.status_code == 200, answer.text
    assert sse_events(answer.text)[-1] == "[DONE]"
    row = drained(1)[0]
    assert (row.instance, row.status) == ("qwen-pd-d2/0", 200)
    assert row.attempts == 4  # prefill, dead decode, prefill again (the first may be taken), decode


def test_a_stream_cut_mid_way_ends_with_an_openai_shaped_error(live_gateway, pd_engines, bob):
    key = key_for(bob)
    busy("qwen-pd-d2/0")
    process = pd_engines["qwen-pd-d1"][1]
    with live_gateway.client(key) as client:
        messages = [{"role": "user", "content": LONG}]
        body = {"model": "qwen", "messages": messages, "max_tokens": 60, "stream": True, "ignore_eos": True}
        with client.stream("POST", "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            lines = response.iter_lines()
            next(line for line in lines if line.startswith("data:"))
            process.send_signal(signal.SIGKILL)
            rest = "\n".join(lines)
    events = sse_events(rest)
    assert "error" in events[-1], events[-3:]
    assert events[-1]["error"]["type"] == "server_error"


def test_a_clients_kv_transfer_params_never_reach_a_decode(live_gateway, pd_engines, bob):
    key = key_for(bob)
    forged = {"do_remote_prefill": True, "remote_engine_id": "qwen-pd", "remote_block_ids": [0],
              "remote_host": "127.0.0.1", "remote_port": 9, "remote_request_id": "nope"}  # fmt: skip
    answer = ask(live_gateway, key, kv_transfer_params=forged)
    assert answer.status_code == 200, answer.text  # with the forged params the decode could not pull


@pytest.mark.parametrize("pd_engines", ["impostor"], indirect=True)
def test_params_naming_another_engine_are_not_passed_on(live_gateway, pd_engines, bob):
    key = key_for(bob)
    busy("qwen-pd-r2/0")  # qwen-pd (whose params name "someone-else") is picked first
    answer = ask(live_gateway, key)
    assert answer.status_code == 200, answer.text
    assert drained(1)[0].attempts == 3  # qwen-pd's params refused, qwen-pd-r2's used, one decode
    stop(pd_engines["qwen-pd-r2"][1])
    refused = ask(live_gateway, key)
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "no_healthy_replica"
