import json
import os
from pathlib import Path

import pytest

from tests.unit.fake_runner import FakeResult, FakeRunner
from workers.ascend.versions import (
    ComponentVersion,
    UnknownVersionFile,
    find_versions,
    main,
    parse_version_file,
)

SAMPLES = Path(__file__).resolve().parents[2].parent / "shared" / "ascend-samples"

# Our own fixtures, written from the documented formats (values differ from the captured samples).
DRIVER_INFO = """Version=24.1.0
ascendhal_version=7.35.23
aicpu_version=1.0
tdt_version=1.0
Innerversion=V100R001C19SPC002B226
compatible_version=[V100R001C13],[V100R001C19]
compatible_version_fw=[7.0.0,7.6.99]
package_version=24.1.0
"""
FIRMWARE_INFO = """Version=7.5.0.3.220
firmware_version=1.0
package_version=24.1.0
compatible_version_drv=[24.1.0,24.1.0.],[24.1.rc3,24.1.rc3.]
"""
TOOLKIT_INFO = """package_name=Ascend-cann-toolkit
version={version}
innerversion=V100R001C19SPC001B137
compatible_version=[V100R001C15],[V100R001C19]
arch=aarch64
os=linux
path=/usr/local/Ascend/ascend-toolkit/{version}/aarch64-linux
"""
NNAE_INFO = """package_name=Ascend-cann-nnae
version=8.0.0
innerversion=V100R001C20B101
arch=aarch64
os=linux
path=/usr/local/Ascend/nnae/8.0.0
"""
NNAL_INFO = """    Ascend-cann-atb : 8.1.RC1
    Ascend-cann-atb Version : 8.1.RC1.B040
    Platform : aarch64
    branch : br_release_cann_8.1.RC1
    commit id : 0123456789abcdef0123456789abcdef01234567
"""
VERSION_CFG = """# version: 1.0
runtime_running_version=[7.6.0.1.220:8.0.0]
toolkit_running_version=[7.6.0.1.220:8.0.0]
runtime_installed_version=[7.5.0.1.129:8.0.RC3][7.6.0.1.220:8.0.0]
toolkit_installed_version=[7.5.0.1.129:8.0.RC3][7.6.0.1.220:8.0.0]
"""


def sample(name: str) -> str:
    path = SAMPLES / name
    if not path.exists():
        pytest.skip(f"{path} is absent")
    return path.read_text()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("driver-version-info_23.0.7_mindcluster.txt", ComponentVersion("driver", "23.0.7", None)),
        ("driver-version-info_24.1.rc1_hwdoc.txt", ComponentVersion("driver", "24.1.rc1", None)),
        (
            "firmware-version-info_7.1.0.11.220_mindcluster.txt",
            ComponentVersion("firmware", "7.1.0.11.220", None),
        ),
        (
            "ascend_toolkit_install-info_06_7.0.T10_mindcluster.txt",
            ComponentVersion("cann-toolkit", "7.0.T10", "aarch64"),
        ),
        (
            "ascend_toolkit_install-info_07_8.5.0-newpath_hwdoc.txt",
            ComponentVersion("cann-toolkit", "8.5.0", "aarch64"),
        ),
        ("ascend_nnae_install-info_8.0.RC3_mindcluster.txt", ComponentVersion("nnae", "8.0.RC3", "x86_64")),
        ("cann-version-cfg_01.txt", ComponentVersion("cann-toolkit", "8.0.RC3", None)),
    ],
)
def test_it_reads_the_captured_samples_from_their_content_alone(name, expected):
    assert parse_version_file(sample(name)) == expected


def test_it_tells_firmware_from_driver_by_their_keys_even_in_the_wrong_folder():
    assert parse_version_file(FIRMWARE_INFO, "/usr/local/Ascend/driver/version.info").component == "firmware"
    assert parse_version_file(DRIVER_INFO).component == "driver"


def test_it_reads_the_nnal_colon_format_with_its_platform_as_arch():
    assert parse_version_file(NNAL_INFO) == ComponentVersion("nnal", "8.1.RC1", "aarch64")


def test_it_takes_the_running_version_from_version_cfg():
    assert parse_version_file(VERSION_CFG) == ComponentVersion("cann-toolkit", "8.0.0", None)


def test_it_takes_the_newest_installed_version_when_version_cfg_has_no_running_one():
    text = "[version]\ntoolkit_installed_version=[7.0.0.5.242:7.0.RC1][7.3.0.1.231:8.0.RC2]\n"
    assert parse_version_file(text).version == "8.0.RC2"


def test_it_names_a_bare_version_info_from_its_folder():
    assert (
        parse_version_file("Version=23.0.3\n", "/usr/local/Ascend/driver/version.info").component == "driver"
    )
    assert parse_version_file("Version=7.1.0.5.220\n", "/x/firmware/version.info").component == "firmware"


def test_it_refuses_a_bare_version_info_that_nothing_identifies():
    with pytest.raises(UnknownVersionFile, match="not a known Ascend version file"):
        parse_version_file(
            "Version=7.5.0.1.129\n", "/usr/local/Ascend/ascend-toolkit/latest/runtime/version.info"
        )


def test_it_refuses_a_toolkit_info_without_a_version():
    with pytest.raises(UnknownVersionFile, match="has no version"):
        parse_version_file("package_name=Ascend-cann-toolkit\narch=aarch64\n")


def test_the_cli_prints_component_version_and_arch(tmp_path, capsys):
    path = tmp_path / "ascend_toolkit_install.info"
    path.write_text(TOOLKIT_INFO.format(version="8.1.RC1"))
    assert main([str(path)]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "component": "cann-toolkit",
        "version": "8.1.RC1",
        "arch": "aarch64",
    }


def test_the_cli_exits_2_with_a_message_on_an_unknown_file(tmp_path, capsys):
    path = tmp_path / "notes.txt"
    path.write_text("hello=world\n")
    assert main([str(path)]) == 2
    assert "not a known Ascend version file" in capsys.readouterr().err


def test_the_cli_exits_2_with_a_message_on_a_missing_file(tmp_path, capsys):
    assert main([str(tmp_path / "missing.info")]) == 2
    assert "cannot read" in capsys.readouterr().err


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def old_layout(root: Path) -> None:
    """ascend-toolkit/<ver>/<arch>-linux with a `latest` symlink, as CANN before 8.5 installs."""
    write(root / "driver" / "version.info", DRIVER_INFO)
    write(root / "firmware" / "version.info", FIRMWARE_INFO)
    for version in ("8.0.RC3", "8.0.0"):
        write(
            root / "ascend-toolkit" / version / "aarch64-linux" / "ascend_toolkit_install.info",
            TOOLKIT_INFO.format(version=version),
        )
    os.symlink("8.0.0", root / "ascend-toolkit" / "latest")
    write(root / "ascend-toolkit" / "8.0.0" / "version.cfg", VERSION_CFG)
    write(root / "nnae" / "8.0.0" / "aarch64-linux" / "ascend_nnae_install.info", NNAE_INFO)
    os.symlink("8.0.0", root / "nnae" / "latest")
    write(root / "nnal" / "atb" / "8.1.RC1" / "version.info", NNAL_INFO)
    os.symlink("8.1.RC1", root / "nnal" / "atb" / "latest")


async def test_it_finds_every_component_in_the_old_layout(tmp_path):
    old_layout(tmp_path)
    runner = FakeRunner(real_commands=True, real_files=True)
    found = await find_versions(runner, str(tmp_path))
    assert found == {
        "cann-toolkit": {
            "version": "8.0.0",
            "arch": "aarch64",
            "path": f"{tmp_path}/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info",
        },
        "driver": {"version": "24.1.0", "arch": None, "path": f"{tmp_path}/driver/version.info"},
        "firmware": {"version": "7.5.0.3.220", "arch": None, "path": f"{tmp_path}/firmware/version.info"},
        "nnae": {
            "version": "8.0.0",
            "arch": "aarch64",
            "path": f"{tmp_path}/nnae/latest/aarch64-linux/ascend_nnae_install.info",
        },
        "nnal": {"version": "8.1.RC1", "arch": "aarch64", "path": f"{tmp_path}/nnal/atb/latest/version.info"},
    }


async def test_it_finds_the_toolkit_in_the_8_5_cann_layout(tmp_path):
    write(tmp_path / "driver" / "version.info", DRIVER_INFO)
    write(
        tmp_path / "cann-8.5.0" / "aarch64-linux" / "ascend_toolkit_install.info",
        TOOLKIT_INFO.format(version="8.5.0").replace("ascend-toolkit/8.5.0", "cann-8.5.0"),
    )
    runner = FakeRunner(real_commands=True, real_files=True)
    found = await find_versions(runner, str(tmp_path))
    assert found["cann-toolkit"] == {
        "version": "8.5.0",
        "arch": "aarch64",
        "path": f"{tmp_path}/cann-8.5.0/aarch64-linux/ascend_toolkit_install.info",
    }
    assert set(found) == {"driver", "cann-toolkit"}


async def test_it_prefers_the_newest_of_two_cann_folders_with_no_active_link(tmp_path):
    for version in ("8.5.0", "8.5.1"):
        write(
            tmp_path / f"cann-{version}" / "aarch64-linux" / "ascend_toolkit_install.info",
            TOOLKIT_INFO.format(version=version),
        )
    found = await find_versions(FakeRunner(real_commands=True, real_files=True), str(tmp_path))
    assert found["cann-toolkit"]["version"] == "8.5.1"


async def test_it_falls_back_to_version_cfg_when_no_install_info_is_found():
    runner = FakeRunner(
        commands={},  # find answers nothing: a host where find is missing or the tree is unreadable
        files={
            "/opt/Ascend/ascend-toolkit/latest/version.cfg": VERSION_CFG,
            "/opt/Ascend/driver/version.info": "Version=24.1.0\n",
        },
    )
    found = await find_versions(runner, "/opt/Ascend/")
    assert found == {
        "cann-toolkit": {
            "version": "8.0.0",
            "arch": None,
            "path": "/opt/Ascend/ascend-toolkit/latest/version.cfg",
        },
        "driver": {"version": "24.1.0", "arch": None, "path": "/opt/Ascend/driver/version.info"},
    }
    assert runner.calls[0][:4] == ["find", "-L", "/opt/Ascend", "-maxdepth"]


async def test_it_uses_what_find_listed_even_when_find_exits_non_zero():
    listed = "/opt/Ascend/ascend-toolkit/latest/x86_64-linux/ascend_toolkit_install.info\n"
    find_argv = (
        "find",
        "-L",
        "/opt/Ascend",
        "-maxdepth",
        "4",
        "(",
        "-name",
        "ascend_toolkit_install.info",
        "-o",
        "-name",
        "ascend_nnae_install.info",
        "-o",
        "-name",
        "ascend_nnal_install.info",
        "-o",
        "-name",
        "version.cfg",
        ")",
        "-type",
        "f",
    )
    runner = FakeRunner(
        commands={
            find_argv: FakeResult(
                list(find_argv),
                exit_status=1,
                stdout=listed,
                stderr="find: '/opt/Ascend/x': Permission denied",
            )
        },
        files={listed.strip(): TOOLKIT_INFO.format(version="8.1.RC1").replace("aarch64", "x86_64")},
    )
    found = await find_versions(runner, "/opt/Ascend")
    assert found["cann-toolkit"] == {"version": "8.1.RC1", "arch": "x86_64", "path": listed.strip()}


async def test_an_empty_root_has_no_versions(tmp_path):
    assert await find_versions(FakeRunner(real_commands=True, real_files=True), str(tmp_path)) == {}


async def test_the_local_runner_finds_the_same_versions_in_a_real_tree(tmp_path):
    from workers.hosts.local import LocalRunner

    old_layout(tmp_path)
    via_fake = await find_versions(FakeRunner(real_commands=True, real_files=True), str(tmp_path))
    via_local = await find_versions(LocalRunner(), str(tmp_path))
    assert via_local == via_fake
    assert via_local["cann-toolkit"]["version"] == "8.0.0"
