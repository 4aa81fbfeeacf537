"""The simulated engine (workers.sim.engine) as a process: start it, wait until healthy, stop it."""

import os
import signal
import socket
import subprocess
import sys
import time

import httpx


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen, timeout: float = 20) -> list[int]:
    """Poll /health until 200; returns the statuses seen on the way."""
    statuses = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read()
        try:
            statuses.append(httpx.get(f"{url}/health", timeout=2).status_code)
        except httpx.TransportError:
            statuses.append(0)
        if statuses[-1] == 200:
            return statuses
        time.sleep(0.05)
    raise AssertionError(f"engine never became healthy: {statuses[-5:]}")


def start_engine(port: int, *extra: str, env: dict | None = None) -> subprocess.Popen:
    command = [sys.executable, "-m", "workers.sim.engine", "--port", str(port), "--host", "127.0.0.1",
               "--model", "/models/Qwen2.5-7B-Instruct", "--served-model-name", "qwen", *extra]  # fmt: skip
    environment = {
        **os.environ,
        "SIM_ENGINE_START_DELAY": "0.6",
        "SIM_ENGINE_TOKEN_DELAY": "0.001",
        **(env or {}),
    }
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment
    )


def stop(process: subprocess.Popen) -> str:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=20)
    return output
