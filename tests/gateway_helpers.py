"""Shared by the gateway's integration and engine tests: a real web server (panel.web) serving the
panel on the test database and Redis, deployments made through the API, and reading SSE answers."""

import json
import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import api_client_for
from tests.deployment_helpers import deployment_json, wait_for
from tests.integration.conftest import TEST_NODE
from tests.live_web import database_url, start_web


class LiveGateway:
    def __init__(self, url: str, process: subprocess.Popen, log_path: Path):
        self.url = url
        self.process = process
        self.log_path = log_path

    @property
    def v1(self) -> str:
        return f"{self.url}/v1"

    def client(self, key: str | None = None, timeout: float = 60) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout, trust_env=False)

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture(scope="module")
def live_gateway(_wired_to_redis, tmp_path_factory):
    """The web server (panel.web) serving panel.asgi on the test database and the test Redis, as production
    runs the gateway (a separate process: what it knows comes from the database and Redis only)."""
    from django.conf import settings
    from django.db import connection

    from panel.run import free_port, wait_for_port

    data = tmp_path_factory.mktemp("gateway-web")
    port = free_port()
    env = {
        **os.environ,
        "PANEL_MODE": "run",
        "DEBUG": "0",
        "DATABASE_URL": database_url(connection.settings_dict),
        "REDIS_URL": _wired_to_redis,
        "PANEL_DATA_DIR": str(data),
        "SECRET_KEY": settings.SECRET_KEY,
        "PANEL_SECRETS_KEY": settings.PANEL_SECRETS_KEY,
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    log_path = data / "web.log"
    process = start_web(port, env, log_path)
    try:
        wait_for_port(port, timeout=60)
        yield LiveGateway(f"http://127.0.0.1:{port}", process, log_path)
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()


def deploy(
    client, model, folder, name: str, served: str, node: str, npus: list[int], timeout: float = 60
) -> dict:
    """A deployment made through the API, once it runs."""
    body = {
        "name": name,
        "model": model.pk,
        "path": str(folder),
        "nodes": [{"node": node, "npus": npus}],
        "served_model_name": served,
    }
    created = client.post("/api/v1/deployments/", body, format="json")
    assert created.status_code == 201, created.json()
    pk = created.json()["id"]
    return wait_for(
        lambda: (d := deployment_json(client, pk))["status"] == "running" and d, timeout, f"{name} running"
    )


def sse_events(text: str) -> list:
    """The data of each SSE event: parsed JSON, or the raw string ([DONE])."""
    events = []
    for line in text.splitlines():
        if line.startswith("data:"):
            data = line[5:].strip()
            events.append(data if not data.startswith("{") else json.loads(data))
    return events


def drained(expected: int, timeout: float = 10):
    """Run the beat's drain until `expected` usage rows are stored; the rows, newest first."""
    from panel.gateway.accounting.usage import drain
    from panel.gateway.models import UsageRecord

    deadline = time.monotonic() + timeout
    while True:
        drain()
        rows = list(UsageRecord.objects.order_by("-time"))
        if len(rows) >= expected or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


CHAT = {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 6}


def key_for(user, name="app", **limits):
    from panel.accounts.models import ApiToken

    limits.setdefault("scopes", ["inference"])
    return ApiToken.issue(user, name, **limits)[1]


def chat(gateway, key, model="chat", **extra):
    with gateway.client(key) as client:
        return client.post("/v1/chat/completions", json={"model": model, **CHAT, **extra})


def stream_chat(gateway, key, model="chat", **extra):
    with gateway.client(key) as client:
        response = client.post("/v1/chat/completions", json={"model": model, **CHAT, "stream": True, **extra})
        return response, sse_events(response.text)


def engine_pid(bob, deployment) -> int:
    return deployment_json(api_client_for(bob), deployment["id"])["runtime"]["nodes"][TEST_NODE]["pid"]


def replica_on_its_own_node(model, name: str, port: int):
    """Deployment `name` serving `qwen` on `port`, wanted and observed running on NPU 0 of node-<name>."""
    from panel.core.domain.choices import DeploymentState, DesiredState
    from panel.deployments.models import Deployment
    from panel.nodes.models import Node, Npu

    node = Node.objects.create(name=f"node-{name}", address="127.0.0.1")
    npu = Npu.objects.create(node=node, npu_id=0, chip_id=0, logic_id=0, name="910B3", health="OK")
    deployment = Deployment.objects.create(
        name=name,
        model=model,
        spec={"port": port, "served_model_name": "qwen"},
        desired_state=DesiredState.RUNNING,
        observed_state=DeploymentState.RUNNING,
    )
    deployment.nodes.set([node])
    deployment.npus.set([npu])
    return deployment


def fail_npu_of(deployment, signal_name="npu_smi_critical"):
    """The NPU goes failed as the health policy leaves it; the pool's cached copy is not dropped (no
    deployment row changes), so only the panel's Redis entry can keep requests off it at once."""
    from panel.core.domain.choices import NpuHealthState
    from panel.gateway.instances import failover
    from panel.nodes.models import Npu

    Npu.objects.filter(deployments=deployment).update(
        health_state=NpuHealthState.FAILED, health_reason={"signal": signal_name, "detail": "Critical"}
    )
    return failover.publish()


def serving_row(name: str, port: int, model, served: str, **fields):
    """A deployment row wanted and observed running, its engine on `port` serving `served`."""
    from panel.core.domain.choices import DeploymentState, DesiredState
    from panel.deployments.models import Deployment

    return Deployment.objects.create(
        name=name, model=model, desired_state=DesiredState.RUNNING, observed_state=DeploymentState.RUNNING,
        **{"spec": {"port": port, "served_model_name": served}, **fields},
    )  # fmt: skip
