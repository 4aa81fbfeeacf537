"""Load an engine through its OpenAI API at several concurrencies: TTFT, TPOT, tokens/s and errors.

Each request streams a chat completion with a fixed prompt length (in words, close to tokens for the
tokenizers vLLM serves) and max_tokens = output_len with ignore_eos, so every run generates the same
amount and runs are comparable across deployments.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass

import httpx

from workers.i18n import gettext_noop as _

WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")


@dataclass
class RequestResult:
    ok: bool
    ttft_s: float | None = None
    tpot_s: float | None = None
    output_tokens: int = 0
    error: str = ""


def _percentile(values: list[float], quantile: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(quantile * (len(ordered) - 1))))
    return round(ordered[index], 5)


def prompt_of(length: int) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in range(max(1, length)))


async def one_request(client: httpx.AsyncClient, url: str, model: str, prompt: str, output_len: int):
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": output_len,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    first = None
    chunks = 0
    usage_tokens = None
    try:
        async with client.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode("utf-8", "replace")[:200]
                return RequestResult(ok=False, error=f"HTTP {response.status_code}: {text}")
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                message = json.loads(data)
                if message.get("usage"):
                    usage_tokens = message["usage"].get("completion_tokens")
                choices = message.get("choices") or []
                if choices and (choices[0].get("delta") or {}).get("content"):
                    chunks += 1
                    if first is None:
                        first = time.perf_counter()
    except (httpx.HTTPError, ValueError) as error:
        return RequestResult(ok=False, error=f"{type(error).__name__}: {error}")
    finished = time.perf_counter()
    tokens = usage_tokens if usage_tokens is not None else chunks
    if first is None:
        return RequestResult(ok=False, error="no tokens came back")
    tpot = (finished - first) / (tokens - 1) if tokens > 1 else None
    return RequestResult(ok=True, ttft_s=first - started, tpot_s=tpot, output_tokens=tokens)


async def run_level(
    base_url: str,
    model: str,
    concurrency: int,
    requests: int,
    prompt_len: int,
    output_len: int,
    api_key: str = "",
):
    """`requests` requests with at most `concurrency` in flight; the figures for this level."""
    url = f"{base_url}/v1/chat/completions"
    prompt = prompt_of(prompt_len)
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency + 2)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(600, connect=10), limits=limits, trust_env=False, headers=headers
    ) as client:

        async def gated():
            async with gate:
                return await one_request(client, url, model, prompt, output_len)

        started = time.perf_counter()
        results = await asyncio.gather(*(gated() for _ in range(requests)))
        elapsed = time.perf_counter() - started
    good = [r for r in results if r.ok]
    ttfts = [r.ttft_s for r in good if r.ttft_s is not None]
    tpots = [r.tpot_s for r in good if r.tpot_s is not None]
    tokens = sum(r.output_tokens for r in good)
    errors = [r.error for r in results if not r.ok]
    return {
        "concurrency": concurrency,
        "requests": requests,
        "errors": len(errors),
        "first_error": errors[0] if errors else "",
        "duration_s": round(elapsed, 3),
        "ttft_p50_s": _percentile(ttfts, 0.5),
        "ttft_p95_s": _percentile(ttfts, 0.95),
        "tpot_p50_s": _percentile(tpots, 0.5),
        "tpot_mean_s": round(statistics.fmean(tpots), 5) if tpots else None,
        "output_tokens_per_s": round(tokens / elapsed, 2) if elapsed > 0 else None,
        "requests_per_s": round(len(good) / elapsed, 3) if elapsed > 0 else None,
    }


async def run_benchmark(emitter, payload: dict, api_key: str = "") -> dict:
    """The benchmark operation's body: one level after the other, each reported as it finishes. `api_key`:
    the engine's, opened from the payload by the task."""
    levels = [int(level) for level in payload["concurrency"]]
    results = []
    for index, concurrency in enumerate(levels):
        emitter.progress(
            100 * index / len(levels), _("Concurrency {n}").format(n=concurrency), concurrency=concurrency
        )
        level = await run_level(
            payload["base_url"],
            payload["model"],
            concurrency,
            max(int(payload["requests"]), concurrency),
            int(payload["prompt_len"]),
            int(payload["output_len"]),
            api_key,
        )
        emitter.log(json.dumps(level))
        results.append(level)
    return {"levels": results}
