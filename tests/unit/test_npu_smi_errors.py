"""npu-smi failures become NpuSmiError with the original message and a hint; the argv builders."""

import pytest

from workers.ascend.npu_smi import NpuSmiError, find_error, npu_smi_argv, raise_for_error

FAILURES = [
    pytest.param(
        "DrvMngGetConsoleLogLevel failed. (ret=4)\ndcmi module initialize failed. ret is -8005\n",
        "dcmi module initialize failed. ret is -8005",
        "/dev/davinci",
        id="devices-not-mounted",
    ),
    pytest.param(
        "DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)\n"
        "dcmi model initialized failed, because the device is used. ret is -8020\n",
        "dcmi model initialized failed, because the device is used. ret is -8020",
        "another container",
        id="device-held-by-another-container",
    ),
    pytest.param(
        "dcmi module initialize failed. ret is -8001\n",
        "dcmi module initialize failed. ret is -8001",
        "DCMI error -8001",
        id="other-dcmi-code",
    ),
    pytest.param(
        "npu-smi: error while loading shared libraries: libc_sec.so: cannot open shared object file: "
        "No such file or directory\n",
        "npu-smi: error while loading shared libraries: libc_sec.so: cannot open shared object file: "
        "No such file or directory",
        "LD_LIBRARY_PATH",
        id="driver-libraries-missing",
    ),
    pytest.param(
        "/bin/sh: 1: /usr/local/sbin/npu-smi: No such file or directory\n",
        "/bin/sh: 1: /usr/local/sbin/npu-smi: No such file or directory",
        "not installed",
        id="npu-smi-missing",
    ),
    pytest.param(
        "Error parameter of -t\nUsage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]\n",
        "Error parameter of -t",
        "-t",
        id="unknown-t-type",
    ),
    pytest.param(
        "Error parameter of -i\n",
        "Error parameter of -i",
        "npu-smi info -l",
        id="no-npu-with-that-id",
    ),
    pytest.param(
        "This device does not support querying template-info.\n",
        "This device does not support querying template-info.",
        "template-info",
        id="query-not-supported",
    ),
]


@pytest.mark.parametrize(("output", "message", "hint_part"), FAILURES)
def test_each_known_failure_keeps_the_original_message_and_gives_a_hint(output, message, hint_part):
    with pytest.raises(NpuSmiError) as raised:
        raise_for_error(output)

    assert raised.value.message == message
    assert hint_part in raised.value.hint


def test_the_missing_library_hint_names_the_library():
    error = find_error(
        "npu-smi: error while loading shared libraries: libc_sec.so: cannot open shared object file"
    )

    assert "libc_sec.so" in error.hint
    assert "lib64/common" in error.hint


def test_the_device_busy_code_wins_over_the_generic_dcmi_hint():
    error = find_error("dcmi model initialized failed, because the device is used. ret is -8020")

    assert "DCMI error" not in error.hint


def test_raise_for_error_passes_a_normal_table_through():
    assert find_error("| npu-smi 23.0.6   Version: 23.0.6 |\n| 0     910B2 | OK |\n") is None
    raise_for_error("| npu-smi 23.0.6   Version: 23.0.6 |\n")


def test_the_error_string_carries_message_and_hint():
    error = NpuSmiError("dcmi module initialize failed. ret is -8005", "mount the devices")

    assert str(error) == "dcmi module initialize failed. ret is -8005 (mount the devices)"
    assert (error.message, error.hint) == ("dcmi module initialize failed. ret is -8005", "mount the devices")


@pytest.mark.parametrize(
    ("kind", "npu", "chip", "argv"),
    [
        ("table", None, None, ["npu-smi", "info"]),
        ("mapping", None, None, ["npu-smi", "info", "-m"]),
        ("list", None, None, ["npu-smi", "info", "-l"]),
        ("usages", 32768, None, ["npu-smi", "info", "-t", "usages", "-i", "32768"]),
        ("board", 4, 1, ["npu-smi", "info", "-t", "board", "-i", "4", "-c", "1"]),
        ("health", 0, 0, ["npu-smi", "info", "-t", "health", "-i", "0", "-c", "0"]),
    ],
)
def test_npu_smi_argv_builds_each_command(kind, npu, chip, argv):
    assert npu_smi_argv(kind, npu=npu, chip=chip) == argv


def test_npu_smi_argv_can_name_the_binary():
    assert npu_smi_argv("temp", npu=1, binary="/usr/local/sbin/npu-smi")[0] == "/usr/local/sbin/npu-smi"


@pytest.mark.parametrize(
    ("kind", "npu", "chip", "complaint"),
    [
        ("usages", None, None, "npu must be a non-negative int"),
        ("usages", "0; reboot", None, "npu must be a non-negative int"),
        ("usages", -1, None, "npu must be a non-negative int"),
        ("power", 0, "1", "chip must be a non-negative int"),
        ("topo; rm", 0, None, "unknown npu-smi query"),
        ("table", 0, None, "takes no NPU or chip id"),
    ],
)
def test_npu_smi_argv_refuses_what_is_not_an_id_or_a_known_query(kind, npu, chip, complaint):
    with pytest.raises(ValueError, match=complaint):
        npu_smi_argv(kind, npu=npu, chip=chip)
