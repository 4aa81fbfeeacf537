"""What this host adds to a container launch, and what it checks before `run`: the NUMA node's CPUs as
this machine's kernel has them, where the model folder is, the engine container spec with its labels, the
host paths the driver lends, the image against the host's driver and chip, the image being there.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from workers.ascend.compat import UNVERIFIED
from workers.ascend.facts import parse_numa_cpulist
from workers.ascend.versions import UnknownVersionFile, parse_version_file
from workers.containers import lifecycle
from workers.containers.detect import ascend_runtime_use, engine_images
from workers.containers.hostconf import ContainerHost
from workers.containers.official import preflight
from workers.engine.launch.command import LaunchSpec
from workers.engine.launch.container import ContainerSpec, build_container_run, driver_sources
from workers.i18n import gettext_noop as _
from workers.models.node_paths import host_path


class NotRunnable(Exception):
    """This host cannot run the container as asked; `hint` says what to do."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


def numa_cpuset(host_root: str, numa_node: int | None) -> tuple[str | None, str | None]:
    """(--cpuset-cpus, --cpuset-mems) for a NUMA node: its CPUs (the node's sysfs) that this agent may
    use itself, and the node, when this machine's kernel has it. The kernel that enforces the cpuset is
    this machine's, so a CPU or node it lacks (a simulated host's) is left out rather than refused."""
    if numa_node is None:
        return None, None
    path = host_path(host_root, f"/sys/devices/system/node/node{int(numa_node)}/cpulist")
    try:
        listed = parse_numa_cpulist(path.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None, None
    usable = sorted(set(listed) & os.sched_getaffinity(0))
    if not usable:
        return None, None
    mems = str(int(numa_node)) if os.path.isdir(f"/sys/devices/system/node/node{int(numa_node)}") else None
    return cpu_list(usable), mems


def cpu_list(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    ranges, start = [], None
    for index, cpu in enumerate(cpus):
        if start is None:
            start = cpu
        if index + 1 == len(cpus) or cpus[index + 1] != cpu + 1:
            ranges.append(str(start) if start == cpu else f"{start}-{cpu}")
            start = None
    return ",".join(ranges)


def model_source(host_root: str, model_path: str) -> str:
    """The model folder on this machine: under a simulated host's root when it is there."""
    under_root = host_path(host_root, model_path)
    return str(under_root) if under_root.is_dir() else model_path


async def container_spec(
    runner, config, host: ContainerHost, engine: str, spec: LaunchSpec, container: dict, name: str
) -> ContainerSpec:
    cpus, mems = numa_cpuset(config.host_root, spec.numa_node if spec.chip != "cpu" else None)
    base = ContainerSpec(
        launch=spec,
        name=lifecycle.container_name(name),
        image=str(container.get("image") or ""),
        device_ids=tuple(container.get("device_ids") or ()),
        engine=engine,
        host_network=bool(container.get("host_network", True)),
        shm_size=host.shm_size,
        cpuset_cpus=cpus,
        cpuset_mems=mems if cpus else None,
        ascend_runtime=""
        if spec.chip == "cpu"
        else await ascend_runtime_use(runner, config.host_root, engine),
        cache_dir=host.cache_dir,
        host_root=config.host_root,
        model_source=model_source(config.host_root, spec.model_path),
        extra_mounts=host.mounts,
        env_from_host=host.env_names,
        env_file=lifecycle.env_file_path(config.host_root, name),
    )
    digest = lifecycle.launch_digest(build_container_run(base, host.passed_env()).argv)
    return replace(base, labels=lifecycle.labels(name, config.node_name, digest))


def check_host_paths(spec: ContainerSpec) -> None:
    missing = [m.source for m in driver_sources(spec) if not os.path.exists(m.source)]
    missing += [m.source for m in spec.extra_mounts if not os.path.exists(m.source)]
    if missing:
        raise NotRunnable(
            _("these host paths for the engine container do not exist: {paths}").format(
                paths=", ".join(missing)
            ),
            _(
                "The NPU driver is not fully installed (npu-smi, DCMI and the driver's lib64 come from the "
                "host), or ASCEND_PANEL_CONTAINER_MOUNTS names a path that is not there."
            ),
        )
    if spec.cache_dir:
        Path(host_path(spec.host_root, spec.cache_dir)).mkdir(parents=True, exist_ok=True)


async def preflight_here(runner, config, cspec: ContainerSpec) -> None:
    """The image against this host as it is now (its driver may have changed since the inventory): an
    official image built for another chip, or whose CANN needs a newer driver, is refused before `run`."""
    text = await runner.read_text(f"{config.ascend_root.rstrip('/')}/driver/version.info")
    try:
        driver = parse_version_file(text, "driver/version.info").version if text else None
    except UnknownVersionFile:
        driver = None
    chip = None if cspec.launch.chip == "cpu" else cspec.launch.chip
    problems = [p for p in preflight(cspec.image, chip=chip, driver=driver) if p.kind != UNVERIFIED]
    if problems:
        raise NotRunnable(
            _("{image} cannot run on this node: {what}").format(
                image=cspec.image,
                what=", ".join(f"{p.component} {p.have} (needs {p.need})" for p in problems),
            ),
            problems[0].hint,
        )


async def image_present(runner, engine: str, image: str) -> bool:
    images, _error = await engine_images(runner, engine)
    wanted = image if ":" in image.rsplit("/", 1)[-1] or "@" in image else f"{image}:latest"
    return any(item["reference"] in (image, wanted) for item in images)
