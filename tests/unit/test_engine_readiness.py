"""Readiness beyond /health: one real completion, sent to the stand-in engine while its process is watched."""

import asyncio
import subprocess

import pytest

from tests.sim_engine_process import free_port, start_engine, stop, wait_healthy
from workers.engine.running import readiness
from workers.hosts.local import LocalRunner
from workers.sim import state as sim_state
from workers.sim.tree import create_host


@pytest.fixture
def sim_root(tmp_path):
    create_host(tmp_path, "atlas-800i-a2")
    return tmp_path


def started(sim_root, *, dies: bool = False) -> tuple[subprocess.Popen, str]:
    if dies:
        sim_state.set_engine_dies_on_first_request(sim_root)
    port = free_port()
    process = start_engine(port, "--enforce-eager", env={"ASCEND_PANEL_SIM_ROOT": str(sim_root)})
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, process)
    return process, url


async def test_an_engine_that_answers_one_token_is_ready(sim_root):
    process, url = started(sim_root)
    try:
        check = await readiness.check_first_request(LocalRunner(), process.pid, url, "qwen")
        assert process.poll() is None
    finally:
        stop(process)
    assert check == readiness.FirstRequest(ok=True)


async def test_an_engine_healthy_until_its_first_request_kills_it_is_not_ready(sim_root):
    process, url = started(sim_root, dies=True)
    try:
        check = await readiness.check_first_request(LocalRunner(), process.pid, url, "qwen")
    finally:
        output = stop(process)
    assert not check.ok
    assert check.exited
    assert process.returncode == 1
    assert "Head dimension 320 is not supported by MLA." in output
    # The 500 usually arrives before the process is gone; either way the reason names what happened.
    assert "HTTP 500: EngineCore encountered an issue" in check.detail or check.detail == (
        "the engine process exited"
    )


async def test_an_error_answer_from_a_live_engine_is_not_ready_and_says_why(sim_root, monkeypatch):
    monkeypatch.setattr(readiness, "EXIT_AFTER_ERROR_S", 0.5)
    process, url = started(sim_root)
    try:
        check = await readiness.check_first_request(LocalRunner(), process.pid, url, "not-served")
        assert process.poll() is None
    finally:
        stop(process)
    assert check == readiness.FirstRequest(
        ok=False, exited=False, detail="HTTP 404: The model `not-served` does not exist."
    )


async def test_an_engine_that_never_answers_is_not_ready_after_the_timeout(monkeypatch):
    monkeypatch.setattr(readiness, "EXIT_AFTER_ERROR_S", 0.5)
    held = []

    async def accept_and_say_nothing(reader, writer):
        held.append(writer)

    server = await asyncio.start_server(accept_and_say_nothing, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    sleeper = subprocess.Popen(["sleep", "30"])  # stands for the engine process: alive throughout
    try:
        check = await readiness.check_first_request(
            LocalRunner(), sleeper.pid, f"http://127.0.0.1:{port}", "qwen", timeout=1.0
        )
    finally:
        sleeper.kill()
        sleeper.wait()
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()
    assert check == readiness.FirstRequest(ok=False, exited=False, detail="no answer within 1 s")


async def test_an_engine_that_dies_while_asked_is_seen_at_once():
    """A process that ends while the request waits: the watch notices it, not the request's timeout."""
    held = []

    async def accept_and_say_nothing(reader, writer):
        held.append(writer)

    server = await asyncio.start_server(accept_and_say_nothing, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    short_lived = subprocess.Popen(["sleep", "0.5"])
    try:
        check = await readiness.check_first_request(
            LocalRunner(), short_lived.pid, f"http://127.0.0.1:{port}", "qwen", timeout=60.0
        )
    finally:
        short_lived.wait()
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()
    assert check == readiness.FirstRequest(ok=False, exited=True, detail="the engine process exited")
