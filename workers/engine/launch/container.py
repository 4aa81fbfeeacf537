"""The `run -d` argv that starts the same vLLM launch in a container, for docker, podman or iSula.

The container sees only the NPUs passed as /dev/davinciN, where N is the physical device id (npu-smi
info -m, "Chip Phy-ID"; equal to the logic id on most 910B boards, not on every host). Inside, those NPUs
are numbered again from 0, so ASCEND_RT_VISIBLE_DEVICES is left out. The driver, npu-smi and DCMI come
from the host as read-only mounts, as vllm-ascend's documented `docker run` does; the model folder is
mounted read-only at the same path, so the launch's --model path is valid on both sides. Where the
Ascend Docker Runtime is the engine's runtime, ASCEND_VISIBLE_DEVICES names the NPUs instead and the
runtime's hook mounts the devices and the driver itself.

The command runs as the image's entrypoint (`--entrypoint` is the launch's program), so an image that
starts `vllm serve` by itself (vLLM's own images) still runs exactly the launch the review showed.
Environment values are given with `-e NAME=value`, except secrets (the engine's API key) and what the
host passes from its own environment: those travel by name only (`-e NAME`, docker and podman read the
value from the CLI's environment; iSula reads them from an --env-file), so they never show in argv.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

from workers.engine.launch.command import LaunchSpec, LaunchSpecError, build_launch, local_npu_count

ENGINES = ("docker", "podman", "isula")
IMAGE_REPOSITORY = "quay.io/ascend/vllm-ascend"
# The CANN and NNAL scripts inside the vllm-ascend image.
IMAGE_SET_ENV_SCRIPTS = (
    "/usr/local/Ascend/ascend-toolkit/set_env.sh",
    "/usr/local/Ascend/nnal/atb/set_env.sh",
)
ASCEND_CONTROL_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
DRIVER_MOUNTS = (
    "/usr/local/dcmi",
    "/usr/local/bin/npu-smi",
    "/usr/local/Ascend/driver/lib64",
    "/usr/local/Ascend/driver/version.info",
    "/etc/ascend_install.info",
)
CACHE_TARGET = "/root/.cache"  # Hugging Face, ModelScope and torch caches inside the image
SECRET_ENV = ("VLLM_API_KEY",)
# How the Ascend Docker Runtime is reached: "" (not used: devices and driver mounts), "default" (the
# engine's default runtime), "ascend" (registered under that name, asked for with --runtime).
ASCEND_RUNTIMES = ("", "default", "ascend")

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
# [registry[:port]/]path[:tag][@sha256:digest], as the distribution reference grammar allows.
IMAGE_PATTERN = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::\d{1,5})?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
)
SHM_PATTERN = re.compile(r"^\d{1,6}[kmg]?$")
CPUSET_PATTERN = re.compile(r"^\d{1,4}(-\d{1,4})?(,\d{1,4}(-\d{1,4})?)*$")
LABEL_KEY_PATTERN = re.compile(r"^[a-z0-9][a-z0-9.\-]{0,127}$")
ENV_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


@dataclass(frozen=True)
class Mount:
    source: str  # on this machine
    target: str  # in the container
    read_only: bool = True

    def flag(self) -> str:
        return f"{self.source}:{self.target}:{'ro' if self.read_only else 'rw'}"


@dataclass(frozen=True)
class ContainerSpec:
    launch: LaunchSpec  # the same spec the process runtime uses; venv and set_env paths are ignored
    name: str  # container name
    image: str  # full reference, e.g. quay.io/ascend/vllm-ascend:v0.11.0
    device_ids: tuple[int, ...] = ()  # physical NPU ids -> /dev/davinciN (none for a CPU launch)
    engine: str = "docker"
    host_network: bool = True  # multi-node HCCL and Gloo need the host's interfaces
    shm_size: str = "16g"  # vLLM's worker processes exchange tensors through /dev/shm
    cpuset_cpus: str | None = None  # the NUMA node's CPUs, instead of numactl inside the image
    cpuset_mems: str | None = None
    ascend_runtime: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    cache_dir: str | None = "/var/lib/ascend-panel/cache"  # node path mounted read-write at /root/.cache
    # Where node paths are on this machine: "/" on a real host, a simulated host's tree otherwise.
    host_root: str = "/"
    model_source: str | None = None  # the model folder on this machine, when not under host_root
    extra_mounts: tuple[Mount, ...] = ()  # the host's own policy (ASCEND_PANEL_CONTAINER_MOUNTS)
    env_from_host: tuple[str, ...] = ()  # names whose values the host passes from its environment
    env_file: str | None = None  # iSula: where the values passed by name are written before `run`


@dataclass(frozen=True)
class ContainerRun:
    """argv to run; cli_env for the CLI's own environment (values passed by name); for iSula, the
    --env-file text the caller writes (mode 0600) at spec.env_file before running argv."""

    argv: list[str]
    cli_env: dict[str, str]
    env_file_text: str | None = None


def on_host(host_root: str, node_path: str) -> str:
    """Where the node path is on this machine (a simulated host keeps its tree under host_root)."""
    if host_root in ("", "/"):
        return node_path
    return str(PurePosixPath(host_root) / node_path.lstrip("/"))


def driver_sources(spec: ContainerSpec) -> list[Mount]:
    """The devices' companions every NPU launch mounts from the host (none under the Ascend runtime)."""
    if spec.launch.chip == "cpu" or spec.ascend_runtime:
        return []
    return [Mount(on_host(spec.host_root, path), path) for path in DRIVER_MOUNTS]


def build_container_run(spec: ContainerSpec, host_env: dict[str, str] | None = None) -> ContainerRun:
    """The `run -d` command for spec. host_env: the values of spec.env_from_host (the agent's own)."""
    _check(spec)
    inner = build_launch(_inner_spec(spec))
    argv = [spec.engine, "run", "-d", "--name", spec.name]
    for key, value in spec.labels:
        argv += ["--label", f"{key}={value}"]
    argv += ["--shm-size", spec.shm_size]
    argv += _network(spec)
    if spec.cpuset_cpus:
        argv += ["--cpuset-cpus", spec.cpuset_cpus]
    if spec.cpuset_mems:
        argv += ["--cpuset-mems", spec.cpuset_mems]
    argv += _devices(spec)
    for mount in driver_sources(spec):
        argv += ["-v", mount.flag()]
    model_dir = spec.launch.model_path
    argv += ["-v", Mount(spec.model_source or on_host(spec.host_root, model_dir), model_dir).flag()]
    if spec.cache_dir:
        argv += ["-v", Mount(on_host(spec.host_root, spec.cache_dir), CACHE_TARGET, False).flag()]
    for mount in spec.extra_mounts:
        argv += ["-v", mount.flag()]
    plain = {k: v for k, v in inner.env.items() if k not in SECRET_ENV}
    by_name = {k: v for k, v in inner.env.items() if k in SECRET_ENV}
    by_name.update({name: (host_env or {})[name] for name in spec.env_from_host if name in (host_env or {})})
    if spec.ascend_runtime:
        plain["ASCEND_VISIBLE_DEVICES"] = ",".join(str(i) for i in spec.device_ids)
    for name, value in sorted(plain.items()):
        argv += ["-e", f"{name}={value}"]
    env_file_text = None
    if by_name and spec.engine == "isula":
        if spec.env_file is None or not _absolute(spec.env_file):
            raise LaunchSpecError("env_file must be an absolute path: iSula reads the secrets from a file")
        argv += ["--env-file", spec.env_file]
        env_file_text = "".join(f"{name}={value}\n" for name, value in sorted(by_name.items()))
    else:
        for name in sorted(by_name):
            argv += ["-e", name]
    program, *arguments = inner.argv
    argv += ["--entrypoint", program, spec.image, *arguments]
    cli_env = {} if spec.engine == "isula" else by_name
    return ContainerRun(argv=argv, cli_env=cli_env, env_file_text=env_file_text)


def _inner_spec(spec: ContainerSpec) -> LaunchSpec:
    scripts = () if spec.launch.chip == "cpu" else IMAGE_SET_ENV_SCRIPTS
    inner = replace(spec.launch, venv_path=None, set_env_scripts=scripts, numa_node=None, logic_ids=())
    if not spec.host_network:
        # With a port mapping the server must listen on the container's own interface; the mapping
        # publishes it on the host address the launch asked for.
        inner = replace(inner, host="0.0.0.0")  # noqa: S104
    return inner


def _network(spec: ContainerSpec) -> list[str]:
    if spec.host_network:
        # iSula names the option --net only; docker and podman document --network (--net is an alias).
        return ["--net" if spec.engine == "isula" else "--network", "host"]
    port = spec.launch.port
    return ["-p", f"{spec.launch.host}:{port}:{port}"]


def _devices(spec: ContainerSpec) -> list[str]:
    if spec.launch.chip == "cpu":
        return []
    if spec.ascend_runtime:
        return ["--runtime", "ascend"] if spec.ascend_runtime == "ascend" else []
    argv = []
    for device in [f"/dev/davinci{i}" for i in spec.device_ids] + list(ASCEND_CONTROL_DEVICES):
        source = on_host(spec.host_root, device)
        argv += ["--device", device if source == device else f"{source}:{device}"]
    return argv


def _check(spec: ContainerSpec) -> None:
    problems = [
        *_image_and_limit_problems(spec),
        *_device_problems(spec),
        *_network_problems(spec),
        *_path_problems(spec),
        *_label_and_env_problems(spec),
    ]
    if problems:
        raise LaunchSpecError("; ".join(problems))


def _image_and_limit_problems(spec: ContainerSpec) -> list[str]:
    """Which engine runs which image under which name, and the container's memory and CPU limits."""
    problems = []
    if spec.engine not in ENGINES:
        problems.append(f"engine must be one of {', '.join(ENGINES)}; got {spec.engine!r}")
    if not NAME_PATTERN.fullmatch(spec.name):
        problems.append(f"name may hold letters, digits and _ . - (not first); got {spec.name!r}")
    if not IMAGE_PATTERN.fullmatch(spec.image):
        problems.append(
            f"image must be an image reference such as {IMAGE_REPOSITORY}:v0.11.0; got {spec.image!r}"
        )
    if not SHM_PATTERN.fullmatch(spec.shm_size):
        problems.append(f"shm_size must look like 16g or 512m; got {spec.shm_size!r}")
    for name in ("cpuset_cpus", "cpuset_mems"):
        value = getattr(spec, name)
        if value is not None and not CPUSET_PATTERN.fullmatch(value):
            problems.append(f"{name} must be a CPU list such as 0-23,48-71; got {value!r}")
    return problems


def _network_problems(spec: ContainerSpec) -> list[str]:
    if spec.host_network:
        return []
    problems = []
    if spec.launch.multi_node is not None:
        problems.append("a multi-node launch needs host networking (HCCL dials the node's own address)")
    if spec.engine == "isula":
        problems.append("iSula publishes ports only on a CNI network; use host networking")
    return problems


def _label_and_env_problems(spec: ContainerSpec) -> list[str]:
    problems = [
        f"label {key!r} must be a lower-case dotted name with a one-line value"
        for key, value in spec.labels
        if not LABEL_KEY_PATTERN.fullmatch(key) or "\n" in value or len(value) > 256
    ]
    problems.extend(
        f"env_from_host: {name!r} is not an environment variable name"
        for name in spec.env_from_host
        if not ENV_NAME_PATTERN.fullmatch(name)
    )
    return problems


def _device_problems(spec: ContainerSpec) -> list[str]:
    if spec.ascend_runtime not in ASCEND_RUNTIMES:
        return [f"ascend_runtime must be '', 'default' or 'ascend'; got {spec.ascend_runtime!r}"]
    if spec.launch.chip == "cpu":
        return ["device_ids must be empty for a CPU launch"] if spec.device_ids else []
    if spec.ascend_runtime and spec.engine == "podman":
        return ["podman does not use the Ascend Docker Runtime; pass the NPUs as devices"]
    if not spec.device_ids or any(
        not isinstance(i, int) or isinstance(i, bool) or i < 0 for i in spec.device_ids
    ):
        return [f"device_ids must list physical NPU ids; got {spec.device_ids!r}"]
    if len(set(spec.device_ids)) != len(spec.device_ids):
        return [f"device_ids repeats an NPU: {spec.device_ids!r}"]
    needed = local_npu_count(spec.launch)
    if len(spec.device_ids) != needed:
        return [f"device_ids lists {len(spec.device_ids)} NPUs but TP x local DP needs {needed}"]
    return []


def _path_problems(spec: ContainerSpec) -> list[str]:
    problems = []
    paths = {"host_root": spec.host_root, "model_path": spec.launch.model_path}
    if spec.model_source is not None:
        paths["model_source"] = spec.model_source
    if spec.cache_dir is not None:
        paths["cache_dir"] = spec.cache_dir
    for mount in spec.extra_mounts:
        paths[f"mount {mount.source}"] = mount.source
        paths[f"mount target {mount.target}"] = mount.target
    for name, path in paths.items():
        if not _absolute(path) or ":" in path or "," in path:
            problems.append(f"{name} must be an absolute path without ':' or ','; got {path!r}")
    return problems


def _absolute(path: str | None) -> bool:
    return isinstance(path, str) and path.startswith("/") and "\x00" not in path and "\n" not in path
