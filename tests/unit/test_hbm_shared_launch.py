"""The --gpu-memory-utilization an engine on a shared NPU is launched with (issue 36 item 3): vllm-ascend caps
the whole card with it (everything allocated on the device counts against total x the flag), so an engine
started beside others gets its own share plus theirs; the rendered command carries it."""

from panel.deployments.placement.hbm import capped_launch
from workers.engine.launch.command import build_launch
from workers.engine.launch.launch_spec import launch_spec_from_payload

PAYLOAD = {
    "model_path": "/models/tiny-qwen",
    "served_model_name": "small-b",
    "port": 8102,
    "gpu_memory_utilization": 0.4,
    "chip": "910b",
    "logic_ids": [0],
}


def flag(payload: dict) -> str:
    argv = build_launch(launch_spec_from_payload(payload, log_path="/x.log", venv_path="/venv")).argv
    return argv[argv.index("--gpu-memory-utilization") + 1]


def test_an_engine_beside_another_is_capped_at_both_shares_in_the_rendered_command():
    assert flag(capped_launch(PAYLOAD, 0.4, [[0.4]])) == "0.8"
    # Alone on its NPUs (or beside engines that sleep or stopped, which the caller leaves out): its own.
    assert flag(capped_launch(PAYLOAD, 0.4, [[]])) == "0.4"
    # Several NPUs: the fullest decides, so the engine fits on each.
    two = {**PAYLOAD, "logic_ids": [0, 1], "tensor_parallel_size": 2}
    assert flag(capped_launch(two, 0.3, [[0.2], [0.3, 0.25]])) == "0.85"
    # The plan is left as it was: the payload is copied.
    assert PAYLOAD["gpu_memory_utilization"] == 0.4


def test_vllm_cpu_takes_the_flag_per_engine_and_the_cap_never_passes_one():
    assert flag(capped_launch({**PAYLOAD, "chip": "cpu", "logic_ids": []}, 0.4, [[0.4]])) == "0.4"
    assert flag(capped_launch(PAYLOAD, 0.5, [[0.45, 0.1]])) == "1"
