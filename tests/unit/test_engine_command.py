"""vLLM command lines: process runtime, multi-node data parallel, containers, extra-flag allow-list."""

import shlex
import subprocess
from dataclasses import replace

import pytest

from workers.engine.launch.command import (
    SOURCE_THEN_EXEC,
    LaunchSpec,
    LaunchSpecError,
    MultiNode,
    build_launch,
    display_command,
    source_then_exec,
)
from workers.engine.launch.flags import FlagError, flag_arguments, parse_flag_text

CANN = "/usr/local/Ascend/ascend-toolkit/set_env.sh"
NNAL = "/usr/local/Ascend/nnal/atb/set_env.sh"

QWEN_72B = LaunchSpec(
    model_path="/models/Qwen2.5-72B-Instruct",
    served_model_name="qwen2.5-72b",
    port=8000,
    log_path="/var/log/ascend-panel/qwen.log",
    tensor_parallel_size=4,
    max_model_len=32768,
    dtype="bfloat16",
    logic_ids=(4, 5, 6, 7),
    numa_node=1,
    venv_path="/opt/ascend-panel/venvs/vllm-0.9.1",
    set_env_scripts=(CANN, NNAL),
)


def vllm_part(argv):
    """The argv from the python interpreter on (after the bash and numactl wrappers)."""
    start = next(i for i, item in enumerate(argv) if item.endswith("python") or item == "python3")
    return argv[start:]


def value_after(argv, flag):
    return argv[argv.index(flag) + 1]


def test_it_runs_the_api_server_module_from_the_venv():
    launch = build_launch(QWEN_72B)
    command = vllm_part(launch.argv)
    assert command[:5] == [
        "/opt/ascend-panel/venvs/vllm-0.9.1/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/models/Qwen2.5-72B-Instruct",
    ]
    assert value_after(command, "--tensor-parallel-size") == "4"
    assert value_after(command, "--max-model-len") == "32768"
    assert value_after(command, "--served-model-name") == "qwen2.5-72b"
    assert value_after(command, "--host") == "127.0.0.1"
    assert "--data-parallel-size" not in command
    assert launch.log_path == "/var/log/ascend-panel/qwen.log"


def test_it_sources_cann_and_nnal_through_a_fixed_wrapper_with_paths_as_arguments():
    argv = build_launch(QWEN_72B).argv
    assert argv[:7] == ["bash", "-c", SOURCE_THEN_EXEC, "ascend-env", "2", CANN, NNAL]
    assert CANN not in argv[2]


def test_it_binds_to_the_numa_node_of_the_npus():
    argv = build_launch(QWEN_72B).argv
    assert argv[7:10] == ["numactl", "--cpunodebind=1", "--membind=1"]
    assert "numactl" not in build_launch(replace(QWEN_72B, numa_node=None)).argv


def test_it_sets_the_ascend_environment_with_logic_ids():
    env = build_launch(QWEN_72B).env
    assert env["ASCEND_RT_VISIBLE_DEVICES"] == "4,5,6,7"
    assert env["PYTORCH_NPU_ALLOC_CONF"] == "expandable_segments:True"
    assert env["TASK_QUEUE_ENABLE"] == "1"
    assert env["CPU_AFFINITY_CONF"] == "1"
    assert env["HCCL_OP_EXPANSION_MODE"] == "AIV"
    assert "HCCL_IF_IP" not in env


def test_it_leaves_hccl_alone_for_a_single_npu():
    single = replace(QWEN_72B, tensor_parallel_size=1, logic_ids=(0,))
    assert "HCCL_OP_EXPANSION_MODE" not in build_launch(single).env


def test_it_serves_310p_in_eager_mode():
    card = replace(QWEN_72B, chip="310p", dtype="float16", tensor_parallel_size=2, logic_ids=(0, 1))
    launch = build_launch(card)
    assert "--enforce-eager" in launch.argv
    assert "HCCL_OP_EXPANSION_MODE" not in launch.env


def test_it_passes_planned_switches():
    planned = replace(QWEN_72B, quantization="ascend", enforce_eager=True, enable_expert_parallel=True)
    command = vllm_part(build_launch(planned).argv)
    assert value_after(command, "--quantization") == "ascend"
    assert "--enforce-eager" in command
    assert "--enable-expert-parallel" in command


HEAD = MultiNode(
    role="head",
    data_parallel_size_local=2,
    data_parallel_start_rank=0,
    data_parallel_address="10.0.0.11",
    data_parallel_rpc_port=13389,
    node_ip="10.0.0.11",
    ifname="enp189s0f0",
)
R1_HEAD = LaunchSpec(
    model_path="/models/DeepSeek-R1-W8A8",
    served_model_name="deepseek-r1",
    port=8000,
    host="0.0.0.0",  # noqa: S104 - the head serves the API to the network
    log_path="/var/log/ascend-panel/r1.log",
    tensor_parallel_size=4,
    data_parallel_size=4,
    quantization="ascend",
    enable_expert_parallel=True,
    logic_ids=tuple(range(8)),
    venv_path="/opt/vllm",
    set_env_scripts=(CANN, NNAL),
    multi_node=HEAD,
)


def test_it_starts_the_multi_node_head_with_the_data_parallel_flags():
    launch = build_launch(R1_HEAD)
    command = vllm_part(launch.argv)
    assert command[2] == "vllm.entrypoints.openai.api_server"
    assert value_after(command, "--data-parallel-size") == "4"
    assert value_after(command, "--data-parallel-size-local") == "2"
    assert value_after(command, "--data-parallel-address") == "10.0.0.11"
    assert value_after(command, "--data-parallel-rpc-port") == "13389"
    assert "--data-parallel-start-rank" not in command
    assert "--headless" not in command
    assert launch.env["HCCL_IF_IP"] == "10.0.0.11"
    for name in ("HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"):
        assert launch.env[name] == "enp189s0f0"


def test_it_starts_followers_headless_through_vllm_serve():
    follower = replace(
        R1_HEAD,
        multi_node=replace(HEAD, role="follower", data_parallel_start_rank=2, node_ip="10.0.0.12"),
    )
    launch = build_launch(follower)
    command = vllm_part(launch.argv)
    assert command[:6] == [
        "/opt/vllm/bin/python",
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        "/models/DeepSeek-R1-W8A8",
        "--headless",
    ]
    assert value_after(command, "--data-parallel-start-rank") == "2"
    assert value_after(command, "--data-parallel-address") == "10.0.0.11"
    assert launch.env["HCCL_IF_IP"] == "10.0.0.12"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"multi_node": replace(HEAD, data_parallel_start_rank=2)}, "data_parallel_start_rank"),
        ({"multi_node": replace(HEAD, data_parallel_address="head; reboot")}, "data_parallel_address"),
        ({"multi_node": replace(HEAD, ifname="eth0 -x")}, "ifname"),
        ({"multi_node": replace(HEAD, data_parallel_size_local=5)}, "exceeds data_parallel_size"),
    ],
)
def test_it_rejects_inconsistent_multi_node_settings(change, field):
    with pytest.raises(LaunchSpecError, match=field):
        build_launch(replace(R1_HEAD, **change))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"model_path": "models/qwen"}, "model_path"),
        ({"served_model_name": "--trust-remote-code"}, "served_model_name"),
        ({"port": 70000}, "port"),
        ({"host": "0.0.0.0 --api-key x"}, "host"),
        ({"logic_ids": (0, 1)}, "logic_ids"),
        ({"logic_ids": (0, 0, 1, 2)}, "logic_ids"),
        ({"venv_path": "venv"}, "venv_path"),
        ({"set_env_scripts": ("set_env.sh",)}, "set_env_scripts"),
        ({"gpu_memory_utilization": 0}, "gpu_memory_utilization"),
        ({"chip": "910c"}, "chip"),
    ],
)
def test_it_rejects_unsafe_or_wrong_spec_fields(change, field):
    with pytest.raises(LaunchSpecError, match=field):
        build_launch(replace(QWEN_72B, **change))


def test_it_launches_vllm_cpu_without_ascend_environment():
    cpu = LaunchSpec(
        model_path="/tmp/tiny-model",
        served_model_name="tiny",
        port=8100,
        log_path="/tmp/tiny.log",
        chip="cpu",
        venv_path="/opt/vllm-cpu",
        cpu_kvcache_space_gib=2,
    )
    launch = build_launch(cpu)
    assert launch.argv[0] == "/opt/vllm-cpu/bin/python"
    assert "--enforce-eager" in launch.argv
    assert launch.env == {"VLLM_CPU_KVCACHE_SPACE": "2"}


def test_extra_flags_come_from_the_allow_list_with_typed_values():
    argv = flag_arguments(
        {
            "--max-num-seqs": 64,
            "--enable-prefix-caching": True,
            "--trust-remote-code": False,
            "--additional-config": {"ascend_scheduler_config": {"enabled": True}},
            "--tool-call-parser": "hermes",
        }
    )
    assert argv == [
        "--max-num-seqs",
        "64",
        "--enable-prefix-caching",
        "--additional-config",
        '{"ascend_scheduler_config":{"enabled":true}}',
        "--tool-call-parser",
        "hermes",
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"--tensor-parallel-size": 8}, "field 'tensor_parallel_size'"),
        ({"--api-key": "secret"}, "not an allowed vLLM flag"),
        ({"--max-num-seqs": "64; rm -rf /"}, "whole number"),
        ({"--max-num-seqs": True}, "whole number"),
        ({"--enable-prefix-caching": "yes"}, "switch"),
        ({"--additional-config": "[1, 2]"}, "JSON object"),
        ({"--additional-config": "{not json"}, "JSON object"),
        ({"--tool-call-parser": "hermes --trust-remote-code"}, "plain name"),
        ({"--chat-template": "templates/chat.jinja"}, "absolute path"),
        ({"--block-size": 16}, "128"),
    ],
)
def test_it_rejects_flags_off_the_allow_list_or_with_wrong_values(extra, message):
    with pytest.raises(FlagError, match=message):
        flag_arguments(extra)


def test_it_reads_flags_typed_into_a_form():
    tokens = shlex.split("--max-num-seqs 64 --enable-prefix-caching --tokenizer-mode=slow")
    extra = parse_flag_text(tokens)
    assert extra == {"--max-num-seqs": "64", "--enable-prefix-caching": True, "--tokenizer-mode": "slow"}
    assert flag_arguments(extra) == [
        "--max-num-seqs",
        "64",
        "--enable-prefix-caching",
        "--tokenizer-mode",
        "slow",
    ]
    with pytest.raises(FlagError, match="needs a value"):
        parse_flag_text(["--max-num-seqs"])
    with pytest.raises(FlagError, match="set by the panel"):
        parse_flag_text(["--port", "9000"])


def test_the_wrapper_sources_scripts_without_arguments_and_passes_hostile_text_literally(tmp_path):
    cann = tmp_path / "cann.sh"
    cann.write_text('export FROM_CANN=yes\necho "cann got $# arguments" >&2\n')
    nnal = tmp_path / "nnal.sh"
    nnal.write_text('export FROM_NNAL="$FROM_CANN-and-nnal"\n')
    show = "import os, sys; print(os.environ['FROM_NNAL'], sys.argv[1:])"
    argv = source_then_exec([str(cann), str(nnal)], ["python3", "-c", show, "a; touch pwned", "$(id)"])
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=tmp_path, check=False)
    assert result.returncode == 0
    assert result.stdout.strip() == "yes-and-nnal ['a; touch pwned', '$(id)']"
    assert "cann got 0 arguments" in result.stderr
    assert not (tmp_path / "pwned").exists()


def test_the_wrapper_exits_97_when_a_set_env_script_is_missing(tmp_path):
    argv = source_then_exec([str(tmp_path / "missing.sh")], ["true"])
    assert subprocess.run(argv, capture_output=True, timeout=30, check=False).returncode == 97


def test_display_command_quotes_for_the_shell():
    line = display_command(["python3", "-c", "print('a b')"], {"B": "x y", "A": "1"})
    assert line == "A=1 B='x y' python3 -c 'print('\"'\"'a b'\"'\"')'"
    assert shlex.split(line)[2:] == ["python3", "-c", "print('a b')"]
