"""Two stand-in engines play a 1P1D pair as vLLM's proxy drives one: the prefill answers the params for
its decode, the decode pulls the prompt's blocks from it over TCP and its first token waits only for that."""

import json
import time

import httpx
import pytest

from tests.sim_engine_process import free_port, start_engine, stop, wait_healthy

PROMPT = " ".join(f"tok{i}" for i in range(2000))  # 2000 tokens: ~1 s of prefill at 0.5 ms a token
OTHER_PROMPT = " ".join(f"other{i}" for i in range(2000))
ENV = {"SIM_ENGINE_PREFILL_TOKEN_DELAY": "0.0005"}


def kv_config(role: str, engine_id: str, kv_port: int) -> str:
    return json.dumps(
        {"kv_connector": "MooncakeConnectorV1", "kv_role": role, "engine_id": engine_id, "kv_port": kv_port}
    )


@pytest.fixture(scope="module")
def pair():
    kv_port = free_port()
    prefill_port, decode_port = free_port(), free_port()
    prefill = start_engine(
        prefill_port, "--kv-transfer-config", kv_config("kv_producer", "p0", kv_port), env=ENV
    )
    decode = start_engine(
        decode_port, "--kv-transfer-config", kv_config("kv_consumer", "d0", free_port()), env=ENV
    )
    urls = f"http://127.0.0.1:{prefill_port}", f"http://127.0.0.1:{decode_port}"
    wait_healthy(urls[0], prefill)
    wait_healthy(urls[1], decode)
    yield (*urls, kv_port)
    stop(prefill)
    stop(decode)


def prefill_for_remote_decode(url: str, prompt: str = PROMPT) -> dict:
    body = {
        "model": "qwen",
        "prompt": prompt,
        "max_tokens": 1,
        "kv_transfer_params": {"do_remote_decode": True},
    }
    return httpx.post(f"{url}/v1/completions", json=body, timeout=30).json()["kv_transfer_params"]


def decode(url: str, params: dict | None, prompt: str = PROMPT) -> tuple[int, float, str]:
    """Status, seconds to the first streamed token, and the text or error of a decode request."""
    body = {"model": "qwen", "prompt": prompt, "max_tokens": 3, "stream": True, "kv_transfer_params": params}
    started = time.monotonic()
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=30) as response:
        if response.status_code != 200:
            return response.status_code, 0.0, json.loads(response.read())["message"]
        lines = [line for line in response.iter_lines() if line.startswith("data: {")]
        first = time.monotonic() - started if lines else 0.0
    return 200, first, "".join(json.loads(line[6:])["choices"][0]["text"] for line in lines)


def test_the_prefill_answers_what_its_decode_needs(pair):
    prefill_url, _decode_url, kv_port = pair
    params = prefill_for_remote_decode(prefill_url)

    assert params["do_remote_prefill"] is True
    assert params["do_remote_decode"] is False
    assert (params["remote_engine_id"], params["remote_host"], params["remote_port"]) == (
        "p0",
        "127.0.0.1",
        kv_port,
    )
    assert params["remote_request_id"].startswith("cmpl-")
    assert len(params["remote_block_ids"]) == 2000 // 16


def test_the_decode_pulls_the_kv_and_its_first_token_skips_the_prompt(pair):
    prefill_url, decode_url, _kv_port = pair
    status, on_its_own, _ = decode(decode_url, None)  # the whole prompt computed here: ~1 s
    assert status == 200

    # A prompt the decode engine has not seen, so nothing of it is in its own prefix cache.
    params = prefill_for_remote_decode(prefill_url, OTHER_PROMPT)
    status, pulled, text = decode(decode_url, params, OTHER_PROMPT)

    assert status == 200
    assert text == "This is a"
    assert on_its_own > 0.9  # the sim's modelled prompt time: a floor, whatever the machine's load
    # The pull is real TCP and real work, so under load it takes longer; it only has to beat the prompt.
    assert pulled < on_its_own


def test_a_decode_whose_prefill_blocks_were_taken_or_cannot_be_reached_is_refused(pair):
    prefill_url, decode_url, _kv_port = pair
    params = prefill_for_remote_decode(prefill_url)
    assert decode(decode_url, params)[0] == 200

    status, _, message = decode(decode_url, params)  # a decode takes (and frees) the blocks once
    assert status == 500
    assert "holds no blocks" in message

    nobody = {**params, "remote_port": free_port()}
    status, _, message = decode(decode_url, nobody)
    assert status == 500
    assert "cannot reach remote engine p0" in message


def test_a_kv_transfer_config_vllm_would_refuse_stops_the_start():
    port = free_port()
    process = start_engine(port, "--kv-transfer-config", '{"kv_connector": "MooncakeConnectorV1"}')
    output, _ = process.communicate(timeout=20)
    assert process.returncode == 1
    assert "Please specify kv_role when kv_connector is set" in output

    process = start_engine(port, "--kv-transfer-config", '{"kv_role": "kv_producer", "kv_ip": "x"}')
    output, _ = process.communicate(timeout=20)
    assert process.returncode == 1
    assert "extra inputs are not permitted: 'kv_ip'" in output
