"""The `docker run` / `isula run` argv that starts the same vLLM launch in the vllm-ascend image.

The container sees only the NPUs passed as /dev/davinciN, where N is the physical device id (npu-smi
info -m, "Chip Phy-ID"; equal to the logic id on most 910B boards, not on every host). Inside, those NPUs
are numbered again from 0, so ASCEND_RT_VISIBLE_DEVICES is left out. The driver, npu-smi and DCMI come
from the host as read-only mounts, as vllm-ascend's documented `docker run` does; the model folder is
mounted read-only at the same path, so the launch's --model path is valid on both sides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from workers.engine.command import LaunchSpec, LaunchSpecError, build_launch, local_npu_count

IMAGE_REPOSITORY = "quay.io/ascend/vllm-ascend"
RUNTIMES = ("docker", "isula")
# The CANN and NNAL scripts inside the vllm-ascend image.
IMAGE_SET_ENV_SCRIPTS = (
    "/usr/local/Ascend/ascend-toolkit/set_env.sh",
    "/usr/local/Ascend/nnal/atb/set_env.sh",
)
ASCEND_CONTROL_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
HOST_MOUNTS = (
    "/usr/local/dcmi",
    "/usr/local/bin/npu-smi",
    "/usr/local/Ascend/driver/lib64",
    "/usr/local/Ascend/driver/version.info",
    "/etc/ascend_install.info",
)
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
TAG_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")
SHM_PATTERN = re.compile(r"^\d{1,6}[kmg]?$")
CPUSET_PATTERN = re.compile(r"^\d{1,4}(-\d{1,4})?(,\d{1,4}(-\d{1,4})?)*$")


@dataclass(frozen=True)
class ContainerSpec:
    launch: LaunchSpec  # the same spec the process runtime uses; venv and set_env paths are ignored
    name: str  # container name
    image_tag: str  # vllm-ascend version tag, e.g. v0.9.1
    device_ids: tuple[int, ...]  # physical NPU ids -> /dev/davinciN
    model_dir: str  # host folder mounted read-only at the same path
    runtime: str = "docker"
    host_network: bool = True  # multi-node HCCL and Gloo need the host's interfaces
    shm_size: str = "16g"  # vLLM's worker processes exchange tensors through /dev/shm
    cpuset_cpus: str | None = None  # the NUMA node's CPUs, instead of numactl inside the image
    cpuset_mems: str | None = None
    image_repository: str = IMAGE_REPOSITORY


def build_container_run(spec: ContainerSpec) -> list[str]:
    """argv for `docker run -d ...` (or isula, whose run command takes the same options)."""
    _check(spec)
    inner_spec = replace(
        spec.launch, venv_path=None, set_env_scripts=IMAGE_SET_ENV_SCRIPTS, numa_node=None, logic_ids=()
    )
    if not spec.host_network:
        # With a port mapping the server must listen on the container's own interface; the mapping
        # below publishes it on the host address the launch asked for.
        inner_spec = replace(inner_spec, host="0.0.0.0")  # noqa: S104
    inner = build_launch(inner_spec)
    argv = [spec.runtime, "run", "-d", "--name", spec.name, "--shm-size", spec.shm_size]
    if spec.host_network:
        argv.append("--net=host")
    else:
        argv += ["-p", f"{spec.launch.host}:{spec.launch.port}:{spec.launch.port}"]
    if spec.cpuset_cpus:
        argv += ["--cpuset-cpus", spec.cpuset_cpus]
    if spec.cpuset_mems:
        argv += ["--cpuset-mems", spec.cpuset_mems]
    for device_id in spec.device_ids:
        argv += ["--device", f"/dev/davinci{device_id}"]
    for device in ASCEND_CONTROL_DEVICES:
        argv += ["--device", device]
    for path in HOST_MOUNTS:
        argv += ["-v", f"{path}:{path}:ro"]
    argv += ["-v", f"{spec.model_dir}:{spec.model_dir}:ro"]
    for name, value in sorted(inner.env.items()):
        argv += ["-e", f"{name}={value}"]
    return [*argv, f"{spec.image_repository}:{spec.image_tag}", *inner.argv]


def _check(spec: ContainerSpec) -> None:
    problems = []
    if spec.runtime not in RUNTIMES:
        problems.append(f"runtime must be docker or isula; got {spec.runtime!r}")
    if spec.launch.chip == "cpu":
        problems.append("the vllm-ascend image needs NPUs; run CPU launches as a process")
    if not NAME_PATTERN.fullmatch(spec.name):
        problems.append(f"name may hold letters, digits and _ . - (not first); got {spec.name!r}")
    if not TAG_PATTERN.fullmatch(spec.image_tag):
        problems.append(f"image_tag must be an image tag such as v0.9.1; got {spec.image_tag!r}")
    if not spec.device_ids or any(
        not isinstance(i, int) or isinstance(i, bool) or i < 0 for i in spec.device_ids
    ):
        problems.append(f"device_ids must list physical NPU ids; got {spec.device_ids!r}")
    elif len(set(spec.device_ids)) != len(spec.device_ids):
        problems.append(f"device_ids repeats an NPU: {spec.device_ids!r}")
    elif len(spec.device_ids) != local_npu_count(spec.launch):
        needed = local_npu_count(spec.launch)
        problems.append(f"device_ids lists {len(spec.device_ids)} NPUs but TP x local DP needs {needed}")
    if not spec.model_dir.startswith("/") or ":" in spec.model_dir or "\n" in spec.model_dir:
        problems.append(f"model_dir must be an absolute path without ':'; got {spec.model_dir!r}")
    elif not (spec.launch.model_path + "/").startswith(spec.model_dir.rstrip("/") + "/"):
        problems.append("launch.model_path must lie inside model_dir, which is what the container sees")
    if not SHM_PATTERN.fullmatch(spec.shm_size):
        problems.append(f"shm_size must look like 16g or 512m; got {spec.shm_size!r}")
    for name in ("cpuset_cpus", "cpuset_mems"):
        value = getattr(spec, name)
        if value is not None and not CPUSET_PATTERN.fullmatch(value):
            problems.append(f"{name} must be a CPU list such as 0-23,48-71; got {value!r}")
    if problems:
        raise LaunchSpecError("; ".join(problems))
