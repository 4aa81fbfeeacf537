"""Preflight turns collected host facts into a checklist where every problem carries its fix."""

from workers.ascend.compat import profile_for
from workers.steps.base import PipSource
from workers.steps.plan import InstallOptions, plan_install
from workers.steps.preflight import FAIL, PASS, WARN, run_preflight, worst

PROFILE = profile_for("0.13.0")
GIB = 1024**3
OPTIONS = InstallOptions(
    packages_dir="/srv/pkgs",
    driver_version="25.5.0",
    firmware_version="7.8.0.5.216",
    pip=PipSource(index_url="http://m"),
)


def healthy_facts(**overrides):
    facts = {
        "arch": "aarch64",
        "os_release": {"ID": "openEuler", "VERSION_ID": "22.03", "PRETTY_NAME": "openEuler 22.03 (LTS-SP4)"},
        "kernel": "5.10.0-216.0.0.115.oe2203sp4.aarch64",
        "kernel_headers": True,
        "chip": "910b",
        "driver": "25.5.0",
        "firmware": "7.8.0.5.216",
        "cann": "8.5.0",
        "driver_loaded": True,
        "npus": [{"id": i, "health": "OK"} for i in range(8)],
        "disk_free": {"/": 500 * GIB},
        "hugepages": {"total": 0, "free": 0},
        "pythons": {"3.11": "/usr/bin/python3.11"},
        "tools": {"gcc": "/usr/bin/gcc", "make": "/usr/bin/make", "numactl": "/usr/bin/numactl"},
        "mirror_reachable": True,
        "offline_bundle": False,
        "packages_present": [],
    }
    facts.update(overrides)
    return facts


def by_check(checklist):
    return {entry["check"]: entry for entry in checklist}


def test_a_healthy_matching_host_passes_everything():
    checklist = run_preflight(healthy_facts(), PROFILE)
    assert worst(checklist) == PASS, [c for c in checklist if c["status"] != PASS]
    assert by_check(checklist)["npus"]["detail"] == "8 NPUs, all OK"


def test_every_warning_and_failure_has_a_fix():
    facts = healthy_facts(
        arch="x86_64",
        os_release={"ID": "centos", "VERSION_ID": "7"},
        npus=[{"id": 0, "health": "Alarm"}],
        tools={"gcc": None, "make": None, "numactl": None},
        hugepages={"total": 64, "free": 0},
        pythons={},
    )
    checklist = run_preflight(facts, PROFILE)
    problems = [c for c in checklist if c["status"] != PASS]
    assert len(problems) >= 7
    assert all(c["fix"] for c in problems)


def test_an_unhealthy_npu_fails_and_a_warning_npu_only_warns():
    alarm = by_check(
        run_preflight(healthy_facts(npus=[{"id": 0, "health": "OK"}, {"id": 3, "health": "Alarm"}]), PROFILE)
    )
    assert alarm["npus"]["status"] == FAIL
    assert "3:Alarm" in alarm["npus"]["detail"]
    warning = by_check(run_preflight(healthy_facts(npus=[{"id": 0, "health": "Warning"}]), PROFILE))
    assert warning["npus"]["status"] == WARN


def test_an_installed_but_unloaded_driver_asks_for_a_reboot():
    entry = by_check(run_preflight(healthy_facts(driver_loaded=False), PROFILE))["npus"]
    assert entry["status"] == FAIL
    assert "Reboot" in entry["fix"]


def test_a_bare_host_warns_that_the_plan_installs_the_driver():
    facts = healthy_facts(driver=None, firmware=None, cann=None, driver_loaded=False, npus=[])
    steps = plan_install({"chip": "910b", "arch": "aarch64", "pythons": facts["pythons"]}, PROFILE, OPTIONS)
    checklist = by_check(run_preflight(facts, PROFILE, steps, OPTIONS))
    assert checklist["npus"]["status"] == WARN
    assert checklist["driver"]["status"] == PASS
    assert "plan installs it" in checklist["driver"]["detail"]


def test_a_wrong_cann_is_a_warning_the_plan_fixes():
    entry = by_check(run_preflight(healthy_facts(cann="8.3.RC2"), PROFILE))["cann"]
    assert entry["status"] == WARN
    assert "8.3.RC2" in entry["detail"]
    assert "replaces" in entry["fix"]


def test_an_undocumented_driver_pairing_is_a_warning_not_a_pass():
    entry = by_check(run_preflight(healthy_facts(cann="8.5.1"), profile_for("0.18.0")))["driver"]
    assert entry["status"] == WARN
    assert "No public document" in entry["detail"]


def test_an_unsupported_chip_fails():
    entry = by_check(run_preflight(healthy_facts(chip="310b"), PROFILE))["chip"]
    assert entry["status"] == FAIL


def test_unsupported_os_warns_and_kylin_passes():
    assert (
        by_check(run_preflight(healthy_facts(os_release={"ID": "debian", "VERSION_ID": "12"}), PROFILE))[
            "os"
        ]["status"]
        == WARN
    )
    kylin = {"ID": "kylin", "VERSION_ID": "V10", "PRETTY_NAME": "Kylin Linux Advanced Server V10 (Lance)"}
    assert by_check(run_preflight(healthy_facts(os_release=kylin), PROFILE))["os"]["status"] == PASS


def test_disk_space_is_checked_per_install_location():
    facts = healthy_facts(
        driver=None, disk_free={"/": 100 * GIB, "/usr/local": 5 * GIB, "/opt": 50 * GIB}, driver_loaded=False
    )
    steps = plan_install({"chip": "910b", "arch": "aarch64", "pythons": facts["pythons"]}, PROFILE, OPTIONS)
    disks = [c for c in run_preflight(facts, PROFILE, steps, OPTIONS) if c["check"] == "disk"]
    statuses = {c["detail"].split(":")[0]: c["status"] for c in disks}
    assert statuses == {"/usr/local/Ascend": FAIL, "/opt/ascend-panel/venvs": PASS}


def test_missing_kernel_headers_fail_only_when_the_driver_is_installed():
    facts = healthy_facts(driver=None, kernel_headers=False, driver_loaded=False)
    steps = plan_install({"chip": "910b", "arch": "aarch64", "pythons": facts["pythons"]}, PROFILE, OPTIONS)
    assert by_check(run_preflight(facts, PROFILE, steps, OPTIONS))["kernel"]["status"] == FAIL
    assert by_check(run_preflight(healthy_facts(kernel_headers=False), PROFILE))["kernel"]["status"] == PASS


def test_no_python_in_the_profile_range_fails_with_the_interpreter_to_install():
    entry = by_check(run_preflight(healthy_facts(pythons={"3.12": "/usr/bin/python3.12"}), PROFILE))["python"]
    assert entry["status"] == FAIL
    assert "python3.11" in entry["fix"]


def test_missing_gcc_fails_when_the_driver_must_be_built_else_warns():
    facts = healthy_facts(driver=None, driver_loaded=False, tools={"gcc": None, "make": "/usr/bin/make"})
    steps = plan_install({"chip": "910b", "arch": "aarch64", "pythons": facts["pythons"]}, PROFILE, OPTIONS)
    assert by_check(run_preflight(facts, PROFILE, steps, OPTIONS))["gcc"]["status"] == FAIL
    assert (
        by_check(run_preflight(healthy_facts(tools={"make": "/usr/bin/make"}), PROFILE))["gcc"]["status"]
        == WARN
    )


def test_missing_packages_and_an_unreachable_mirror_fail():
    facts = healthy_facts(
        cann="8.3.RC2",
        mirror_reachable=False,
        packages_present=["Ascend-cann-toolkit_8.5.0_linux-aarch64.run"],
    )
    host = {
        "chip": "910b",
        "arch": "aarch64",
        "driver": "25.5.0",
        "firmware": "x",
        "pythons": facts["pythons"],
    }
    checklist = by_check(run_preflight(facts, PROFILE, plan_install(host, PROFILE, OPTIONS), OPTIONS))
    assert checklist["packages"]["status"] == FAIL
    assert "Ascend-cann-910b-ops_8.5.0_linux-aarch64.run" in checklist["packages"]["detail"]
    assert "toolkit" not in checklist["packages"]["detail"]
    assert checklist["pip_source"]["status"] == FAIL


def test_an_offline_bundle_replaces_the_mirror():
    facts = healthy_facts(mirror_reachable=False, offline_bundle=True)
    host = {
        "chip": "910b",
        "driver": "25.5.0",
        "firmware": "x",
        "cann": "8.5.0",
        "ops": "8.5.0",
        "nnal": "8.5.0",
    }
    steps = plan_install({**host, "pythons": facts["pythons"]}, PROFILE, OPTIONS)
    assert by_check(run_preflight(facts, PROFILE, steps, OPTIONS))["pip_source"]["status"] == PASS
