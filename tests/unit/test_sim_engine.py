"""The stand-in engine speaks vLLM's HTTP, logs vLLM's start-up lines and holds its sim NPUs."""

import json
import subprocess
import time

import httpx
import pytest

from tests.sim_engine_process import free_port, start_engine, stop, wait_healthy
from workers.ascend.npu_smi import parse_table
from workers.sim import state as sim_state
from workers.sim.tree import create_host


@pytest.fixture(scope="module")
def engine():
    port = free_port()
    process = start_engine(port, "--tensor-parallel-size", "1", "--enforce-eager", "--max-num-seqs", "8")
    url = f"http://127.0.0.1:{port}"
    statuses = wait_healthy(url, process)
    yield url, process, statuses
    stop(process)


def test_it_answers_503_while_starting_then_200(engine):
    _url, _process, statuses = engine
    assert statuses[-1] == 200
    assert 503 in statuses


def test_models_lists_the_served_name(engine):
    url, _, _ = engine
    models = httpx.get(f"{url}/v1/models").json()
    assert [(m["id"], m["root"], m["owned_by"]) for m in models["data"]] == [
        ("qwen", "/models/Qwen2.5-7B-Instruct", "vllm")
    ]


def test_chat_completion_returns_a_message_and_usage(engine):
    url, _, _ = engine
    body = {"model": "qwen", "messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 4}
    reply = httpx.post(f"{url}/v1/chat/completions", json=body).json()

    assert reply["object"] == "chat.completion"
    assert reply["choices"][0]["message"]["content"] == "This is a simulated"
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 4


def test_streamed_chat_sends_role_then_deltas_then_done(engine):
    url, _, _ = engine
    body = {
        "model": "qwen",
        "messages": [{"role": "user", "content": "Stream please"}],
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line[len("data: ") :] for line in response.iter_lines() if line.startswith("data: ")]

    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "This is a"
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 3


def test_streamed_completion_yields_text_chunks(engine):
    url, _, _ = engine
    body = {"model": "qwen", "prompt": "The future of AI is", "max_tokens": 2, "stream": True}
    with httpx.stream("POST", f"{url}/v1/completions", json=body) as response:
        events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    texts = [json.loads(e)["choices"][0]["text"] for e in events[:-1]]
    assert texts == ["This", " is", ""]
    assert events[-1] == "[DONE]"


def test_an_unknown_model_is_a_404_in_openai_error_shape(engine):
    url, _, _ = engine
    response = httpx.post(f"{url}/v1/completions", json={"model": "nope", "prompt": "x"})
    assert response.status_code == 404
    assert response.json()["message"] == "The model `nope` does not exist."


def test_metrics_use_vllm_names_and_count_tokens(engine):
    url, _, _ = engine
    httpx.post(f"{url}/v1/completions", json={"model": "qwen", "prompt": "one two three", "max_tokens": 5})
    text = httpx.get(f"{url}/metrics").text

    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert samples[f'{name}{{engine="0",model_name="qwen"}}'] == 0.0
    assert 'vllm:gpu_cache_usage_perc{model_name="qwen"}' in samples
    assert samples['vllm:generation_tokens_total{engine="0",model_name="qwen"}'] >= 5
    assert samples['vllm:prompt_tokens_total{engine="0",model_name="qwen"}'] >= 3
    for histogram in ("time_to_first_token", "time_per_output_token", "inter_token_latency"):
        assert samples[f'vllm:{histogram}_seconds_count{{engine="0",model_name="qwen"}}'] > 0
        assert f'vllm:{histogram}_seconds_bucket{{engine="0",model_name="qwen",le="+Inf"}}' in samples


def test_it_logs_vllm_start_up_lines_and_holds_sim_npus_until_sigterm(tmp_path):
    create_host(tmp_path, "atlas-800i-a2")
    port = free_port()
    env = {"ASCEND_PANEL_SIM_ROOT": str(tmp_path), "ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7"}
    process = start_engine(port, "--tensor-parallel-size", "2", "--trust-remote-code", env=env)
    npu_smi = [str(tmp_path / "bin" / "npu-smi"), "info"]
    try:
        wait_healthy(f"http://127.0.0.1:{port}", process)
        table = parse_table(subprocess.run(npu_smi, capture_output=True, text=True, check=True).stdout)
    finally:
        output = stop(process)

    held = [(p["npu_id"], p["pid"]) for p in table["processes"]]
    assert held == [(4, process.pid), (5, process.pid)]
    hbm = {c["npu_id"]: c["hbm_used_mb"] for c in table["chips"]}
    assert hbm[4] == int(65536 * 0.9)
    assert hbm[6] < 4000
    expected_lines = (
        "Loading weights took",
        "GPU KV cache size:",
        "Maximum concurrency for 4,096 tokens",
        "Capturing graphs",
        "Started server process",
        "Application startup complete.",
    )
    for expected in expected_lines:
        assert expected in output
    assert process.returncode == 0
    assert sim_state.load(tmp_path)["holders"] == []


def test_enforce_eager_skips_graph_capture(engine):
    _, process, _ = engine
    assert process.poll() is None  # the module engine runs with --enforce-eager; read its log at the end
    output = stop(process)
    assert "Capturing graphs" not in output
    assert "Application startup complete." in output


def test_it_fails_to_start_when_the_sim_driver_is_not_loaded(tmp_path):
    create_host(tmp_path, "atlas-800i-a2")
    sim_state.set_driver_unloaded(tmp_path)
    process = start_engine(free_port(), env={"ASCEND_PANEL_SIM_ROOT": str(tmp_path)})
    output, _ = process.communicate(timeout=20)
    assert process.returncode == 1
    assert "EngineCore failed to start" in output
    assert "-8005" in output


def test_a_headless_follower_opens_no_api_server_beside_its_head_on_the_same_port(tmp_path):
    """Multi-node parts share one port number and, on sim hosts, one machine: the follower (as vLLM's
    `serve --headless`) must not bind it, or it dies on the head's socket."""
    create_host(tmp_path, "atlas-800i-a2")
    port = free_port()
    head = start_engine(port, "--enforce-eager")
    env = {"ASCEND_PANEL_SIM_ROOT": str(tmp_path), "ASCEND_RT_VISIBLE_DEVICES": "1"}
    follower = None
    try:
        wait_healthy(f"http://127.0.0.1:{port}", head)
        follower = start_engine(port, "serve", "--headless", "--enforce-eager", env=env)
        time.sleep(2)  # start-up takes 0.6 s: a bind on the head's port would have failed by now
        assert follower.poll() is None
        held = [holder["pid"] for holder in sim_state.load(tmp_path)["holders"]]
        assert held == [follower.pid]
    finally:
        output = stop(follower) if follower else ""
        stop(head)
    assert "headless mode" in output
    assert "Application startup complete." not in output
    assert follower is not None
    assert follower.returncode == 0
