"""The launch of an engine that may sleep (issue 36 item 2): --enable-sleep-mode with vLLM's dev mode set by
the launch itself, never by a deployment's env, and only for an engine on loopback (docs/trust-model.md);
the launch matrix's sleep-mode fact with its sources."""

import pytest

from workers.engine.launch.command import DEV_MODE_ENV, LaunchSpec, LaunchSpecError, build_launch
from workers.engine.launch.launch_matrix import can_sleep, sleep_mode_facts
from workers.engine.launch.launch_spec import launch_spec_from_payload


def spec(**overrides):
    values = {
        "model_path": "/models/tiny",
        "served_model_name": "tiny",
        "port": 8000,
        "log_path": "/var/log/tiny.log",
        "logic_ids": (0,),
    }
    values.update(overrides)
    return LaunchSpec(**values)


def test_an_engine_that_may_sleep_gets_the_flag_and_dev_mode():
    launch = build_launch(spec(enable_sleep_mode=True))
    assert "--enable-sleep-mode" in launch.argv
    assert launch.env[DEV_MODE_ENV] == "1"
    plain = build_launch(spec())
    assert "--enable-sleep-mode" not in plain.argv
    assert DEV_MODE_ENV not in plain.env


def test_the_payload_field_reaches_the_launch():
    payload = {"model_path": "/m", "served_model_name": "m", "port": 8001, "host": "127.0.0.1",
               "enable_sleep_mode": True, "logic_ids": [0]}  # fmt: skip
    built = launch_spec_from_payload(payload, log_path="/l.log", venv_path=None)
    assert built.enable_sleep_mode is True


@pytest.mark.parametrize("host", ["0.0.0.0", "10.2.0.7", "npu-host-1"])  # noqa: S104
def test_dev_mode_is_refused_for_an_engine_on_the_network(host):
    with pytest.raises(LaunchSpecError, match="must listen on loopback"):
        build_launch(spec(enable_sleep_mode=True, host=host))


def test_vllm_cpu_cannot_sleep():
    with pytest.raises(LaunchSpecError, match="Sleep mode is not supported on current platform"):
        build_launch(spec(enable_sleep_mode=True, chip="cpu", logic_ids=()))


def test_a_deployments_env_cannot_turn_dev_mode_on():
    with pytest.raises(LaunchSpecError, match="VLLM_SERVER_DEV_MODE is not on the engine environment"):
        build_launch(spec(env={DEV_MODE_ENV: "1"}))


def test_the_matrix_knows_which_versions_sleep_and_says_where_from():
    facts = sleep_mode_facts()
    assert facts["sources"]
    assert facts["env"] == {DEV_MODE_ENV: "1"}
    assert can_sleep("910b", "0.9.0rc1") is False
    assert can_sleep("910b", "0.9.0rc2") is True
    assert can_sleep("a3", "0.23.0") is True
    assert can_sleep("910b", None) is None  # unknown: not guessed
    assert can_sleep("cpu", "0.32.0") is False
