"""The sim host's power fault (`python -m workers.sim fault --root R --power-off | --power-on`): the host's
processes die at once, its agent goes silent (stopped, so that no supervisor restarts it) until the power
comes back, when the agent is killed for its supervisor to boot it afresh."""

import os
import subprocess
import sys
import time

import pytest

from workers.sim import power
from workers.sim import state as sim_state
from workers.sim.tree import create_host

SLEEPER = "import time; time.sleep(120)"


@pytest.fixture
def host(tmp_path):
    create_host(tmp_path, "atlas-800i-a2")
    return tmp_path


def started(root, *argv: str) -> subprocess.Popen:
    """A process of the host: its environment names the sim root, as the agent's and its engines' do."""
    env = {**os.environ, "ASCEND_PANEL_SIM_ROOT": str(root)}
    return subprocess.Popen([sys.executable, "-c", SLEEPER, *argv], env=env, start_new_session=True)


def state_letter(pid: int) -> str:
    """The kernel's run state of a process (R, S, T stopped, Z zombie), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def wait_state(pid: int, letters: str) -> str:
    for _ in range(100):
        letter = state_letter(pid)
        if letter in letters:
            return letter
        time.sleep(0.05)
    return state_letter(pid)


def fault(root, flag: str) -> str:
    command = [sys.executable, "-m", "workers.sim", "fault", "--root", str(root), flag]
    return subprocess.run(command, capture_output=True, text=True, timeout=30, check=True).stdout


def test_power_off_kills_the_hosts_processes_and_stops_its_agent_until_power_on(host, tmp_path_factory):
    agent = started(host, "-m", "workers.agent")  # the agent's command line, as panel.run starts it
    engine = started(host, "engine")
    elsewhere = started(tmp_path_factory.mktemp("other-host"), "-m", "workers.agent")
    try:
        said = fault(host, "--power-off")
        assert "stopped until --power-on" in said
        assert engine.wait(10) == -9  # gone at once, as with the power
        assert wait_state(agent.pid, "T") == "T"  # silent, not exited: no supervisor restarts it
        assert agent.poll() is None
        assert state_letter(elsewhere.pid) in "RS"  # another host's agent is untouched
        assert power.is_off(sim_state.load(host))

        assert "boots again" in fault(host, "--power-on")
        assert agent.wait(10) == -9  # killed: its supervisor boots it afresh
        assert not power.is_off(sim_state.load(host))
    finally:
        for process in (agent, engine, elsewhere):
            if process.poll() is None:
                process.kill()
                process.wait(10)


def test_clearing_the_chip_faults_leaves_the_power_as_it_is(host):
    power.power_off(host)
    fault(host, "--clear")
    assert power.is_off(sim_state.load(host))
    power.power_on(host)


def test_cut_off_stops_only_the_agent_and_reconnect_lets_the_same_one_go_on(host):
    agent = started(host, "-m", "workers.agent")
    engine = started(host, "engine")
    try:
        assert "left running" in fault(host, "--cut-off")
        assert wait_state(agent.pid, "T") == "T"  # silent
        assert state_letter(engine.pid) in "RS"  # the power stays: the engine runs on
        assert "goes on" in fault(host, "--reconnect")
        assert wait_state(agent.pid, "RS") in "RS"  # the same process, not a boot
        assert agent.poll() is None
        assert engine.poll() is None
        assert not power.is_off(sim_state.load(host))
    finally:
        for process in (agent, engine):
            process.kill()
            process.wait(10)
