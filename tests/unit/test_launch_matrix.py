"""The version table (workers/engine/launch/launch_matrix.yaml): what each vllm-ascend / vLLM release accepts,
and the check of a launch's flags, --additional-config keys and environment against the node's versions."""

import json

import pytest

from workers.ascend.compat import load_matrix
from workers.engine.launch import launch_matrix
from workers.engine.launch.launch_matrix import Stack, check_launch


def findings(stack, flags=None, env=None):
    return [
        (item.field, item.reason.code, item.reason.level)
        for item in check_launch(stack, flags or {}, env or {})
    ]


def messages(stack, flags=None, env=None):
    return [item.reason.message for item in check_launch(stack, flags or {}, env or {})]


V023 = Stack(vllm_ascend="0.23.0", vllm="0.23.0", driver="25.5.1", cann="9.1.0")
V018 = Stack(vllm_ascend="0.18.0", vllm="0.18.0", driver="25.5.0", cann="8.5.1")
V013 = Stack(vllm_ascend="0.13.0", vllm="0.13.0", driver="25.5.0", cann="8.5.0")
V011 = Stack(vllm_ascend="0.11.0", vllm="0.11.0")
V091 = Stack(vllm_ascend="0.9.1", vllm="0.9.1")


def test_every_entry_of_the_table_names_its_sources():
    data = launch_matrix.load()
    for section in ("additional_config", "env_removed", "flags", "graph_modes"):
        for entry in data[section]:
            assert all(source.startswith("https://") for source in entry["sources"]), entry
    assert data["cpu_binding"]["sources"]
    assert data["eplb"]["sources"]
    assert data["env_to_config_sources"]


def test_every_supported_stack_has_a_known_cpu_binding_default():
    # The binder choice must never fall into "unknown" for a stack the panel installs.
    for profile in load_matrix():
        assert launch_matrix.engine_binds_by_default(profile.vllm_ascend) in (True, False)
    assert launch_matrix.engine_binds_by_default("0.18.0rc1") is True
    assert launch_matrix.engine_binds_by_default("0.13.0") is False
    assert launch_matrix.engine_binds_by_default(None) is None


def test_flashcomm1_moved_into_additional_config_in_0_23_0():
    assert messages(V023, env={"VLLM_ASCEND_ENABLE_FLASHCOMM1": "1"}) == [
        "vllm-ascend 0.23.0 reads VLLM_ASCEND_ENABLE_FLASHCOMM1 only while it moves to additional_config; "
        'on 0.23.0 use --additional-config {"enable_flashcomm1": true}.'
    ]
    assert findings(V018, env={"VLLM_ASCEND_ENABLE_FLASHCOMM1": "1"}) == []


def test_the_new_config_key_on_an_old_release_names_the_variable_to_use():
    flags = {"--additional-config": {"enable_flashcomm1": True}}
    assert findings(V018, flags) == [("extra_flags", "config_key_too_new", "error")]
    assert "on 0.18.0 use VLLM_ASCEND_ENABLE_FLASHCOMM1=1 in the environment" in messages(V018, flags)[0]
    assert findings(V023, flags) == []
    # Balance scheduling arrived as a variable in 0.13.0: on 0.11.0 there is nothing to use instead.
    old = messages(V011, {"--additional-config": '{"enable_balance_scheduling": true}'})
    assert "nothing: this version has no such setting" in old[0]


def test_ascend_buffer_pool_is_gone_in_0_23_0_with_its_replacement_named():
    assert findings(V023, env={"ASCEND_BUFFER_POOL": "4:8"}) == [("env", "env_removed", "warning")]
    assert (
        "ASCEND_ENABLE_USE_FABRIC_MEM=1 or HCCL_INTRA_ROCE_ENABLE=1"
        in messages(V023, env={"ASCEND_BUFFER_POOL": "4:8"})[0]
    )
    assert findings(V018, env={"ASCEND_BUFFER_POOL": "4:8"}) == []


def test_torchair_is_refused_from_0_12_0rc1_on_with_aclgraph_as_the_fix():
    flags = {"--additional-config": {"torchair_graph_config": {"enabled": True}}}
    assert findings(V011, flags) == []
    assert findings(V013, flags) == [("extra_flags", "config_key_removed", "error")]
    assert "FULL_DECODE_ONLY" in messages(V013, flags)[0]


def test_old_eplb_keys_point_at_eplb_config():
    flags = {"--additional-config": {"dynamic_eplb": True}}
    assert findings(V011, flags) == []
    assert "use eplb_config.dynamic_eplb" in messages(V018, flags)[0]
    assert findings(V011, {"--additional-config": {"eplb_config": {}}})[0][1] == "config_key_too_new"


@pytest.mark.parametrize(
    ("stack", "flag", "code"),
    [
        (V013, "--disable-log-requests", "flag_removed"),
        (V091, "--enable-log-requests", "flag_too_new"),
        (V018, "--swap-space", "flag_removed"),
    ],
)
def test_flags_the_installed_vllm_rejects_are_errors(stack, flag, code):
    assert findings(stack, {flag: True}) == [("extra_flags", code, "error")]


@pytest.mark.parametrize(
    ("stack", "flag"),
    [(V011, "--disable-log-requests"), (V013, "--enable-log-requests"), (V013, "--swap-space")],
)
def test_flags_the_installed_vllm_accepts_pass(stack, flag):
    assert findings(stack, {flag: True}) == []


def test_a_switch_set_to_false_is_not_passed_so_not_checked():
    assert findings(V013, {"--disable-log-requests": False}) == []


def test_full_and_piecewise_needs_hdk_25_5_1_and_cann_8_5_0():
    old_driver = Stack(vllm_ascend="0.23.0", vllm="0.23.0", driver="25.2.0", cann="9.1.0")
    assert findings(old_driver) == [("extra_flags", "graph_mode_needs_stack", "warning")]
    assert "needs HDK 25.5.1 and CANN 8.5.0" in messages(old_driver)[0]
    assert findings(V023) == []
    # An explicit FULL_DECODE_ONLY avoids the default's stream budget.
    decode_only = {"--compilation-config": {"cudagraph_mode": "FULL_DECODE_ONLY"}}
    assert findings(old_driver, decode_only) == []
    # Before 0.21.0rc1 vllm-ascend has no FULL_AND_PIECEWISE at all.
    both = {"--compilation-config": '{"cudagraph_mode": "FULL_AND_PIECEWISE"}'}
    assert findings(V018, both) == [("extra_flags", "graph_mode_too_new", "error")]


def test_an_unknown_stack_checks_nothing():
    flags = {"--swap-space": "4", "--additional-config": {"torchair_graph_config": {}}}
    assert findings(Stack(), flags, {"ASCEND_BUFFER_POOL": "4:8"}) == []


def test_facts_other_modules_read():
    assert launch_matrix.mtp_method("0.9.1") == "deepseek_mtp"
    assert launch_matrix.mtp_method("0.23.0") == "mtp"
    assert launch_matrix.decode_graph_mode("0.13.0", "deepseek") == "FULL_DECODE_ONLY"
    assert launch_matrix.decode_graph_mode("0.11.0", "deepseek") is None
    assert launch_matrix.eplb_facts("0.18.0")["env"] == {"DYNAMIC_EPLB": "true"}
    assert launch_matrix.eplb_facts("0.13.0") is None
    assert launch_matrix.env_moved_to_config("0.23.0", "VLLM_ASCEND_BALANCE_SCHEDULING")["key"] == (
        "enable_balance_scheduling"
    )
    assert launch_matrix.env_moved_to_config("0.18.0", "VLLM_ASCEND_BALANCE_SCHEDULING") is None


def test_the_cli_prints_findings_and_exits_1_on_an_error(capsys):
    status = launch_matrix.main(["--vllm-ascend", "0.23.0", "--vllm", "0.23.0", "--flag=--swap-space=4"])
    printed = json.loads(capsys.readouterr().out)
    assert status == 1
    assert printed[0]["code"] == "flag_removed"
    assert launch_matrix.main(["--vllm-ascend", "0.23.0", "--env", "VLLM_ASCEND_ENABLE_NZ=1"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["code"] == "env_moved_to_config"
