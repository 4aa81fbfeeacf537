"""The stand-in engine's capacity and prefix cache, seen from outside as vLLM's are: its /metrics (read with
prometheus-client's parser) and the time to a first streamed token."""

import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.sim_engine_process import free_port, start_engine, stop, wait_healthy

LONG_PROMPT = " ".join(f"word{i}" for i in range(2000))  # 2000 tokens, 125 blocks of 16


def metrics(url: str) -> dict[str, float]:
    samples = {}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text):
        for sample in family.samples:
            samples.setdefault(sample.name, sample.value)
            if sample.name == "vllm:time_to_first_token_seconds_bucket":
                samples[f"ttft_le_{sample.labels['le']}"] = sample.value
    samples["ttft_over_1s"] = samples["ttft_le_+Inf"] - samples["ttft_le_1.0"]
    return samples


def time_to_first_token(url: str, prompt: str) -> float:
    body = {"model": "qwen", "prompt": prompt, "max_tokens": 2, "stream": True}
    started = time.monotonic()
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=30) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                return time.monotonic() - started
    raise AssertionError("no token came")


@pytest.fixture(scope="module")
def engine():
    port = free_port()
    env = {"SIM_ENGINE_PREFILL_TOKEN_DELAY": "0.0005", "SIM_ENGINE_TOKEN_DELAY": "0.2"}
    process = start_engine(port, "--max-num-seqs", "2", env=env)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, process)
    yield url
    stop(process)


def test_a_repeated_prompt_hits_the_prefix_cache_in_block_aligned_tokens(engine):
    before = metrics(engine)
    prompt = " ".join(f"again{i}" for i in range(40))  # 40 tokens: 2 full blocks of 16
    for _ in range(2):
        httpx.post(f"{engine}/v1/completions", json={"model": "qwen", "prompt": prompt, "max_tokens": 1})
    after = metrics(engine)

    assert after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"] == 80
    assert after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"] == 32
    assert after["vllm:gpu_prefix_cache_hits_total"] == after["vllm:prefix_cache_hits_total"]
    assert "ttft_le_2560.0" in after  # vLLM's buckets reach 2560 s


def test_a_cached_prompt_has_its_first_token_sooner(engine):
    cold = time_to_first_token(engine, LONG_PROMPT)  # 2000 uncached tokens: ~1 s of prefill
    warm = time_to_first_token(engine, LONG_PROMPT)  # 1999 of them cached

    assert cold > 0.9
    assert warm < cold - 0.7


def test_requests_beyond_max_num_seqs_wait_and_their_ttft_counts_the_wait(engine):
    body = {"model": "qwen", "prompt": "busy", "max_tokens": 5}  # 5 tokens of 0.2 s: ~1 s each
    threads = [
        threading.Thread(
            target=httpx.post, args=(f"{engine}/v1/completions",), kwargs={"json": body, "timeout": 30}
        )
        for _ in range(4)
    ]
    before = metrics(engine)
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    during = metrics(engine)
    for thread in threads:
        thread.join()
    after = metrics(engine)

    assert during["vllm:num_requests_running"] == 2
    assert during["vllm:num_requests_waiting"] == 2
    assert after["vllm:num_requests_running"] == after["vllm:num_requests_waiting"] == 0
    # Two of the four waited ~1 s for a slot: their first tokens came after more than a second.
    late = after["ttft_over_1s"] - before["ttft_over_1s"]
    assert late == 2


def test_without_prefix_caching_nothing_is_a_hit():
    port = free_port()
    process = start_engine(port, "--no-enable-prefix-caching")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        prompt = " ".join(f"w{i}" for i in range(64))
        for _ in range(2):
            httpx.post(f"{url}/v1/completions", json={"model": "qwen", "prompt": prompt, "max_tokens": 1})
        samples = metrics(url)
    finally:
        stop(process)
    assert samples["vllm:prefix_cache_queries_total"] == 128
    assert samples["vllm:prefix_cache_hits_total"] == 0


def test_a_chat_prompt_counts_its_words_and_five_template_tokens_a_message(engine):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "say hello"}]
    body = {"model": "qwen", "messages": messages, "max_tokens": 1}
    usage = httpx.post(f"{engine}/v1/chat/completions", json=body, timeout=30).json()["usage"]
    assert usage["prompt_tokens"] == 4 + 2 * 5
