"""The stand-in engine sleeps and wakes as vLLM's dev routes do, and its HBM in the sim's npu-smi follows."""

import subprocess
import threading
import time

import httpx
import pytest

from tests.sim_engine_process import free_port, start_engine, stop, wait_healthy
from workers.ascend.npu_smi import parse_table
from workers.sim.tree import create_host

AWAKE_MB = int(65536 * 0.9)  # the engine's share of its NPU, as test_sim_engine finds it
SLEEP_ENV = {
    "VLLM_SERVER_DEV_MODE": "1",
    "SIM_ENGINE_WAKE_S_LEVEL1": "0.3",
    "SIM_ENGINE_WAKE_S_LEVEL2": "1.5",
}


def hbm_used_mb(root, npu_id: int) -> int:
    output = subprocess.run(
        [str(root / "bin" / "npu-smi"), "info"], capture_output=True, text=True, check=True
    )
    return {chip["npu_id"]: chip["hbm_used_mb"] for chip in parse_table(output.stdout)["chips"]}[npu_id]


@pytest.fixture(scope="module")
def sleeper(tmp_path_factory):
    root = tmp_path_factory.mktemp("sim-host")
    create_host(root, "atlas-800i-a2")
    port = free_port()
    env = {**SLEEP_ENV, "ASCEND_PANEL_SIM_ROOT": str(root), "ASCEND_RT_VISIBLE_DEVICES": "3"}
    process = start_engine(port, "--enable-sleep-mode", env=env)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, process)
    yield url, root
    stop(process)


def test_level_1_frees_the_hbm_holds_requests_and_wakes_them(sleeper):
    url, root = sleeper
    assert hbm_used_mb(root, 3) == AWAKE_MB

    assert httpx.post(f"{url}/sleep?level=1").json() == {"status": "sleeping", "level": 1}
    assert httpx.get(f"{url}/is_sleeping").json() == {"is_sleeping": True}
    assert hbm_used_mb(root, 3) < 4000  # the chip's base use and the engine's runtime only

    answers = []
    body = {"model": "qwen", "prompt": "held", "max_tokens": 1}
    waiter = threading.Thread(target=lambda: answers.append(httpx.post(f"{url}/v1/completions", json=body)))
    waiter.start()
    time.sleep(0.3)
    assert answers == []
    assert 'vllm:num_requests_waiting{engine="0",model_name="qwen"} 1.0' in httpx.get(f"{url}/metrics").text

    started = time.monotonic()
    assert httpx.post(f"{url}/wake_up").json() == {"status": "awake", "tags": None}
    assert time.monotonic() - started >= 0.3
    waiter.join(timeout=10)
    assert answers[0].status_code == 200
    assert httpx.get(f"{url}/is_sleeping").json() == {"is_sleeping": False}
    assert hbm_used_mb(root, 3) == AWAKE_MB


def test_a_wake_by_tags_is_partial_until_the_kv_cache_is_back(sleeper):
    url, _root = sleeper
    httpx.post(f"{url}/sleep?level=1")

    partial = httpx.post(f"{url}/wake_up?tags=weights").json()
    assert partial == {"status": "sleeping", "tags": ["weights"]}
    assert httpx.get(f"{url}/is_sleeping").json() == {"is_sleeping": True}
    assert httpx.post(f"{url}/wake_up?tags=kv_cache").json() == {"status": "awake", "tags": ["kv_cache"]}


def test_level_2_wakes_slower_than_level_1(sleeper):
    url, root = sleeper
    httpx.post(f"{url}/sleep?level=2")
    assert hbm_used_mb(root, 3) < 4000

    started = time.monotonic()
    httpx.post(f"{url}/wake_up", timeout=10)
    assert time.monotonic() - started >= 1.5
    assert hbm_used_mb(root, 3) == AWAKE_MB


def test_a_level_outside_0_to_2_is_refused_as_fastapi_refuses_it(sleeper):
    url, _root = sleeper
    answer = httpx.post(f"{url}/sleep?level=3")
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["query", "level"]
    assert httpx.get(f"{url}/is_sleeping").json() == {"is_sleeping": False}


def test_without_sleep_mode_the_engine_refuses_to_sleep():
    port = free_port()
    process = start_engine(port, env={"VLLM_SERVER_DEV_MODE": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        answer = httpx.post(f"{url}/sleep?level=1")
        sleeping = httpx.get(f"{url}/is_sleeping").json()
    finally:
        stop(process)
    assert answer.status_code == 500
    assert "--enable-sleep-mode" in answer.json()["message"]
    assert sleeping == {"is_sleeping": False}


def test_without_dev_mode_the_sleep_routes_do_not_exist():
    port = free_port()
    process = start_engine(port, "--enable-sleep-mode", env={"VLLM_SERVER_DEV_MODE": "0"})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        statuses = [
            httpx.post(f"{url}/sleep").status_code,
            httpx.post(f"{url}/wake_up").status_code,
            httpx.get(f"{url}/is_sleeping").status_code,
        ]
    finally:
        output = stop(process)
    assert statuses == [404, 404, 404]
    assert "Route: /sleep" not in output


def test_a_sleep_aborts_what_runs_unless_asked_to_wait(sleeper):
    url, _root = sleeper
    body = {"model": "qwen", "prompt": "long", "max_tokens": 3000, "ignore_eos": True}  # ~3 s of tokens
    answers = []
    runner = threading.Thread(
        target=lambda: answers.append(httpx.post(f"{url}/v1/completions", json=body, timeout=30).json())
    )
    runner.start()
    time.sleep(0.3)
    httpx.post(f"{url}/sleep?level=1")
    runner.join(timeout=10)
    httpx.post(f"{url}/wake_up")

    assert answers[0]["choices"][0]["finish_reason"] == "abort"
    assert 0 < answers[0]["usage"]["completion_tokens"] < 3000
