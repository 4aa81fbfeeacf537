"""The simulated .run packages behave like Huawei's on the command line and write the real files."""

import subprocess
from pathlib import Path

import pytest

from workers.sim.installers import make_sim_package


def run(package: Path, *flags: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(package), *flags], capture_output=True, text=True, input=stdin, timeout=30, check=False
    )


def info(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


@pytest.fixture
def root(tmp_path):
    return tmp_path / "Ascend"


@pytest.fixture
def packages(tmp_path):
    out = tmp_path / "packages"

    def make(kind, version, **kwargs):
        return make_sim_package(kind, version, out, **kwargs)

    return make


def install(package: Path, root: Path, *flags: str) -> subprocess.CompletedProcess:
    result = run(package, *flags, "--quiet", f"--install-path={root}")
    assert result.returncode == 0, result.stderr
    return result


def test_it_names_packages_like_huawei(packages):
    assert packages("driver", "24.1.rc2").name == "Ascend-hdk-910b-npu-driver_24.1.rc2_linux-aarch64.run"
    assert packages("firmware", "7.5.0.1.129").name == "Ascend-hdk-910b-npu-firmware_7.5.0.1.129.run"
    assert packages("driver", "25.5.0", chip="a3").name == "Atlas-A3-hdk-npu-driver_25.5.0_linux-aarch64.run"
    assert packages("toolkit", "8.3.RC2").name == "Ascend-cann-toolkit_8.3.RC2_linux-aarch64.run"
    assert packages("ops", "8.3.RC2").name == "Ascend-cann-kernels-910b_8.3.RC2_linux-aarch64.run"
    assert packages("ops", "8.3.RC2", chip="a3").name == "Atlas-A3-cann-kernels_8.3.RC2_linux-aarch64.run"
    assert packages("ops", "8.5.0", chip="310p").name == "Ascend-cann-310p-ops_8.5.0_linux-aarch64.run"
    assert packages("ops", "9.1.0", chip="a3").name == "Ascend-cann-A3-ops_9.1.0_linux-aarch64.run"
    assert packages("nnal", "8.5.1", arch="x86_64").name == "Ascend-cann-nnal_8.5.1_linux-x86_64.run"


def test_driver_writes_version_info_and_asks_for_reboot_on_first_install(packages, root):
    driver = packages("driver", "24.1.rc2")
    first = install(driver, root, "--full", "--install-for-all")
    written = info(root / "driver" / "version.info")
    assert written["Version"] == "24.1.rc2"
    assert written["package_version"] == "24.1.rc2"
    assert "reboot" in first.stdout.lower()
    again = install(driver, root, "--full", "--install-for-all")
    assert "reboot" not in again.stdout.lower()


def test_full_stack_writes_the_files_the_real_packages_write(packages, root):
    install(packages("driver", "24.1.rc2"), root, "--full", "--install-for-all")
    install(packages("firmware", "7.5.0.1.129", hdk_version="24.1.rc2"), root, "--full")
    install(packages("toolkit", "8.3.RC2"), root, "--full")
    install(packages("ops", "8.3.RC2"), root, "--install")
    install(packages("nnal", "8.3.RC2"), root, "--install")

    firmware = info(root / "firmware" / "version.info")
    assert firmware["Version"] == "7.5.0.1.129"
    assert firmware["package_version"] == "24.1.rc2"
    toolkit = info(root / "ascend-toolkit" / "latest" / "aarch64-linux" / "ascend_toolkit_install.info")
    assert toolkit["version"] == "8.3.RC2"
    assert toolkit["package_name"] == "Ascend-cann-toolkit"
    assert (root / "ascend-toolkit" / "set_env.sh").read_text().count("ASCEND_TOOLKIT_HOME") == 1
    ops = info(root / "ascend-toolkit" / "latest" / "aarch64-linux" / "ascend_ops_install.info")
    assert (ops["package_name"], ops["soc"]) == ("Ascend-cann-kernels-910b", "910b")
    assert "ATB_HOME_PATH" in (root / "nnal" / "atb" / "set_env.sh").read_text()
    assert "Ascend-cann-atb : 8.3.RC2" in (root / "nnal" / "atb" / "latest" / "version.info").read_text()


def test_cann_850_and_later_use_the_cann_version_directory(packages, root):
    install(packages("driver", "25.5.0"), root, "--full")
    install(packages("toolkit", "8.5.0"), root, "--full")
    written = info(root / "cann-8.5.0" / "aarch64-linux" / "ascend_toolkit_install.info")
    assert written["path"] == str(root / "cann-8.5.0" / "aarch64-linux")
    assert (root / "cann" / "set_env.sh").is_file()
    assert (
        info(root / "ascend-toolkit" / "latest" / "aarch64-linux" / "ascend_toolkit_install.info")["version"]
        == "8.5.0"
    )


def test_a_bad_flag_fails_and_names_the_valid_ones(packages, root):
    result = run(packages("driver", "24.1.rc2"), "--fulll", f"--install-path={root}")
    assert result.returncode == 1
    assert "Unsupported parameter: --fulll" in result.stderr
    assert "--install-for-all" in result.stderr
    assert not (root / "driver").exists()


def test_an_action_flag_the_package_lacks_fails(packages, root):
    result = run(packages("firmware", "7.5.0.1.129"), "--install", "--quiet", f"--install-path={root}")
    assert result.returncode == 1
    assert "Unsupported parameter: --install" in result.stderr


def test_no_action_fails(packages, root):
    result = run(packages("toolkit", "8.3.RC2"), "--quiet", f"--install-path={root}")
    assert result.returncode == 1
    assert "exactly one of --full" in result.stderr


def test_cann_without_driver_fails(packages, root):
    result = run(packages("toolkit", "8.3.RC2"), "--full", "--quiet", f"--install-path={root}")
    assert result.returncode == 1
    assert "driver is not installed" in result.stderr
    assert not (root / "ascend-toolkit").exists()


def test_firmware_without_driver_fails(packages, root):
    result = run(packages("firmware", "7.5.0.1.129"), "--full", "--quiet", f"--install-path={root}")
    assert result.returncode == 1
    assert "driver is not installed" in result.stderr


@pytest.mark.parametrize("kind", ["ops", "nnal"])
def test_ops_and_nnal_without_toolkit_fail(packages, root, kind):
    install(packages("driver", "24.1.rc2"), root, "--full")
    result = run(packages(kind, "8.3.RC2"), "--install", "--quiet", f"--install-path={root}")
    assert result.returncode == 1
    assert "toolkit 8.3.RC2 is not installed" in result.stderr


def test_without_quiet_it_asks_for_the_eula_and_stops_on_no(packages, root):
    install(packages("driver", "24.1.rc2"), root, "--full")
    refused = run(packages("toolkit", "8.3.RC2"), "--full", f"--install-path={root}", stdin="n\n")
    assert refused.returncode == 1
    assert "EULA" in refused.stdout
    assert "--quiet" in refused.stderr
    accepted = run(packages("toolkit", "8.3.RC2"), "--full", f"--install-path={root}", stdin="y\n")
    assert accepted.returncode == 0, accepted.stderr


def test_check_verifies_without_installing(packages, root):
    result = run(packages("toolkit", "8.3.RC2"), "--check", f"--install-path={root}")
    assert result.returncode == 0
    assert "All good" in result.stdout
    assert not root.exists()


def test_uninstall_removes_the_toolkit(packages, root):
    install(packages("driver", "24.1.rc2"), root, "--full")
    toolkit = packages("toolkit", "8.3.RC2")
    install(toolkit, root, "--full")
    result = run(toolkit, "--uninstall", f"--install-path={root}")
    assert result.returncode == 0, result.stderr
    assert not (root / "ascend-toolkit" / "8.3.RC2").exists()


def test_on_a_sim_host_each_run_that_changes_something_is_recorded_with_its_start_and_end(
    packages, root, tmp_path, monkeypatch
):
    import json

    from workers.sim.installers.script import RUN_RECORD

    host = tmp_path / "host"
    monkeypatch.setenv("ASCEND_PANEL_SIM_ROOT", str(host))
    driver, toolkit = packages("driver", "24.1.rc2"), packages("toolkit", "8.3.RC2")
    run(driver, "--check")
    install(driver, root, "--full", "--install-for-all")
    assert run(packages("ops", "8.3.RC2"), "--install", "--quiet", f"--install-path={root}").returncode == 1
    install(toolkit, root, "--full")

    lines = [json.loads(line) for line in (host / RUN_RECORD).read_text().splitlines()]
    assert [(line["kind"], line["action"], line["event"], line.get("result")) for line in lines] == [
        ("driver", "--full", "start", None),
        ("driver", "--full", "end", "ok"),
        ("ops", "--install", "start", None),
        ("ops", "--install", "end", "error"),  # no toolkit yet
        ("toolkit", "--full", "start", None),
        ("toolkit", "--full", "end", "ok"),
    ]
    assert lines[0]["pid"] == lines[1]["pid"] != lines[4]["pid"]
    assert lines[0]["time"] <= lines[1]["time"] <= lines[4]["time"]


def test_off_a_sim_host_nothing_is_recorded(packages, root, tmp_path, monkeypatch):
    monkeypatch.delenv("ASCEND_PANEL_SIM_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    install(packages("driver", "24.1.rc2"), root, "--full", "--install-for-all")
    assert not list(tmp_path.rglob("operation.log"))
