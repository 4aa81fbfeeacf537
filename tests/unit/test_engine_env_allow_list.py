"""An engine's environment by allow-list (workers.engine.launch.env_policy): tuning anyone may set,
code-loading variables for admins, everything else for no one; the agent's command builder refuses the
same."""

import pytest

from workers.engine.launch import command, env_policy
from workers.engine.launch.command import LaunchSpec, LaunchSpecError, build_launch

A_LAUNCH = {
    "model_path": "/models/Qwen2.5-7B-Instruct",
    "served_model_name": "qwen",
    "port": 8000,
    "log_path": "/var/log/ascend-panel/qwen.log",
    "tensor_parallel_size": 1,
    "max_model_len": 4096,
    "dtype": "bfloat16",
    "logic_ids": (0,),
}


@pytest.mark.parametrize(
    "name",
    [
        "GCONV_PATH",
        "VLLM_LOGGING_CONFIG_PATH",
        "BASH_ENV",
        "PYTHONSTARTUP",
        "LD_AUDIT",
        "ASCEND_CACHE_PATH",
        "HCCL_",
    ],
)
def test_a_variable_off_the_list_is_refused_to_everyone(name):
    assert env_policy.refused(name)


@pytest.mark.parametrize(
    "name", ["HCCL_BUFFSIZE", "VLLM_ASCEND_ENABLE_NZ", "PYTORCH_NPU_ALLOC_CONF", "OMP_NUM_THREADS"]
)
def test_tuning_is_anyones(name):
    assert env_policy.allowed_to_anyone(name)


@pytest.mark.parametrize(
    "name", ["LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "ASCEND_OPP_PATH", "VLLM_PLUGINS"]
)
def test_code_loading_is_an_admins(name):
    assert env_policy.admin_only(name)
    assert not env_policy.allowed_to_anyone(name)


def test_every_variable_the_recipes_set_is_on_the_list():
    import yaml

    from workers.engine.launch import recipes

    with open(recipes.__file__.replace(".py", ".yaml"), encoding="utf-8") as handle:
        text = yaml.safe_load(handle)
    names = {entry["name"] for recipe in text["recipes"] for entry in recipe.get("env") or []}
    assert names
    assert [name for name in names if env_policy.refused(name)] == []


def _env_names(node) -> set[str]:
    if isinstance(node, dict):
        found = set()
        for key, value in node.items():
            if key == "env" and isinstance(value, dict):
                found |= set(value)
            elif key == "env" and isinstance(value, str):
                found.add(value)
            else:
                found |= _env_names(value)
        return found
    if isinstance(node, list):
        return set().union(*(_env_names(item) for item in node)) if node else set()
    return set()


def test_every_variable_the_launch_matrix_sets_is_tuning_anyone_may_set():
    # The launch sets these itself for the version's features (DYNAMIC_EPLB with EPLB on DeepSeek, the
    # fusion switches): refusing one refused every plan of that version.
    import yaml

    from workers.engine.launch import launch_matrix

    with open(launch_matrix.__file__.replace(".py", ".yaml"), encoding="utf-8") as handle:
        names = _env_names(yaml.safe_load(handle))
    assert "DYNAMIC_EPLB" in names
    # Dev mode is the one the launch sets by itself (an idle: engine on loopback,
    # workers.engine.launch.command), and exactly because it opens routes the engine's key does not guard, no
    # spec may set it.
    assert not env_policy.allowed_to_anyone(command.DEV_MODE_ENV)
    names.discard(command.DEV_MODE_ENV)
    assert [name for name in sorted(names) if not env_policy.allowed_to_anyone(name)] == []


def test_the_agents_command_builder_refuses_a_variable_off_the_list():
    with pytest.raises(LaunchSpecError, match="GCONV_PATH"):
        build_launch(LaunchSpec(**A_LAUNCH, env={"GCONV_PATH": "/tmp/evil"}))
    assert build_launch(LaunchSpec(**A_LAUNCH, env={"HCCL_BUFFSIZE": "512"})).env["HCCL_BUFFSIZE"] == "512"
