"""A sim host losing power, and getting it back (issue 37: node power-off).

A host that loses power stops everything at once: its engines die mid-answer, its agent sends nothing more,
and no process gets to say goodbye (no TCP FIN, no last heartbeat). On one machine, with the agent supervised
(panel.run, the fault tier's systemd stand-in, both restart a program that exits), that is played as:

- every engine the host records, and every other process of the host (its environment names this sim root),
  is SIGKILLed: gone, as with the power;
- the agent is SIGSTOPped, not killed: a killed agent would be started again by its supervisor within a
  second and the node would never go offline. A stopped one keeps its sockets open and answers nothing, as a
  dead host's half-open connections do until the other side gives up.

`power_on` is the boot: the stopped agent is SIGKILLed, so its supervisor starts it afresh (no engines run:
they died with the power); where nothing supervises it, the caller starts the agent. The pids stopped are
kept in the host's state (`power`), so the power-on finds them from another process.

`cut_off` is the other way a host goes silent: its network (or only its agent) is cut, the power stays. Its
engines keep running and answering whoever reaches them; only the agent is SIGSTOPped. `reconnect` lets it
go on (SIGCONT): the same agent process heartbeats again, and the engines it recorded are still there. The
panel must then stop those of replicas it moved elsewhere meanwhile (panel/deployments/failover/fence.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from workers.engine.running import runtime
from workers.sim import state as sim_state

AGENT_MODULE = "workers.agent"


def _processes_of(roots: set[Path]) -> list[tuple[int, str]]:
    """(pid, command line) of the processes whose environment names this sim root, this one left out."""
    markers = {f"ASCEND_PANEL_SIM_ROOT={root}".encode() for root in roots}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in (os.getpid(), os.getppid()):
            continue
        with contextlib.suppress(OSError):
            if markers.isdisjoint((entry / "environ").read_bytes().split(b"\0")):
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            found.append((int(entry.name), command))
    return found


def _engine_groups(root: Path) -> list[int]:
    """The process groups of the engines the host records (each engine runs in a group of its own)."""
    groups = []
    for record_file in runtime.state_dir(str(root)).glob("*.json"):
        record = runtime.load_record(str(root), record_file.stem)
        if record is not None:
            groups.append(record.pid)
    return groups


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


def power_off(root: str | os.PathLike) -> dict:
    """Cut the host's power: engines and the rest killed, the agent stopped. Returns what it did."""
    where = Path(root).resolve()
    sim_state.load(where)  # a sim root, or the error that says how to make one
    engines = _engine_groups(where)
    for group in engines:
        _signal_group(group, signal.SIGKILL)
    frozen, killed = [], []
    # The environment holds the root as the host's starter spelled it: resolved or not.
    for pid, command in _processes_of({where, Path(os.path.abspath(root))}):
        if AGENT_MODULE in command.split():
            _signal(pid, signal.SIGSTOP)
            frozen.append(pid)
        else:
            _signal(pid, signal.SIGKILL)
            killed.append(pid)
    with sim_state.locked(where) as current:
        earlier = (current.get("power") or {}).get("frozen") or []
        current["power"] = {"off": True, "since": time.time(), "frozen": sorted({*earlier, *frozen})}
    return {"engines": engines, "killed": killed, "frozen": frozen}


def power_on(root: str | os.PathLike) -> dict:
    """Power back: the stopped agent is killed so that its supervisor boots it afresh."""
    where = Path(root).resolve()
    with sim_state.locked(where) as current:
        frozen = (current.get("power") or {}).get("frozen") or []
        current["power"] = {"off": False, "since": time.time(), "frozen": []}
    for pid in frozen:
        _signal(pid, signal.SIGKILL)
        _signal(pid, signal.SIGCONT)  # a stopped process dies of SIGKILL at once; CONT lets a reaper see it
    return {"booted": frozen}


def _agents(where: Path, root) -> list[int]:
    return [
        pid
        for pid, command in _processes_of({where, Path(os.path.abspath(root))})
        if AGENT_MODULE in command.split()
    ]


def cut_off(root: str | os.PathLike) -> dict:
    """Cut the host off the panel, the power on: its agent stopped, its engines left running."""
    where = Path(root).resolve()
    sim_state.load(where)
    frozen = _agents(where, root)
    for pid in frozen:
        _signal(pid, signal.SIGSTOP)
    with sim_state.locked(where) as current:
        current["cut_off"] = {"since": time.time(), "frozen": frozen}
    return {"frozen": frozen, "engines": _engine_groups(where)}


def reconnect(root: str | os.PathLike) -> dict:
    """The host's network is back: the stopped agent goes on where it stopped."""
    where = Path(root).resolve()
    with sim_state.locked(where) as current:
        frozen = (current.pop("cut_off", None) or {}).get("frozen") or []
    for pid in frozen:
        _signal(pid, signal.SIGCONT)
    return {"resumed": frozen}


def is_off(state: dict) -> bool:
    return bool((state.get("power") or {}).get("off"))
