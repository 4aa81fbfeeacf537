"""The agent checks the preflight's rows again before an install's first step: a failed row stops it before
anything changes, unless the panel sent an admin's override for that row."""

import pytest

from workers.ascend.compat import profile_for
from workers.steps.plan import InstallOptions
from workers.tasks.install import InstallFailed, hold_on_failed_checks
from workers.tasks.install_host import HostPaths

GIB = 1024**3
PATHS = HostPaths.for_host("/nonexistent-sim-root", "/usr/local/Ascend")
FACTS = {
    "arch": "aarch64",
    "os_release": {"ID": "openEuler", "VERSION_ID": "22.03", "PRETTY_NAME": "openEuler 22.03"},
    "kernel": "5.10.0",
    "kernel_headers": True,
    "chip": "310p",  # vllm-ascend 0.7.3 supports Atlas A2 only
    "driver": "25.2.0",
    "firmware": "7.8.0.2.212",
    "cann": "8.1.RC1",
    "driver_loaded": True,
    "npus": [{"id": 0, "health": "OK"}],
    "disk_free": {"/": 500 * GIB},
    "hugepages": {"total": 0, "free": 0},
    "pythons": {"3.11": "/usr/bin/python3.11"},
    "tools": {"gcc": "/usr/bin/gcc", "make": "/usr/bin/make", "numactl": "/usr/bin/numactl"},
}


def test_a_failed_row_stops_the_install_and_names_it_with_its_fix():
    with pytest.raises(InstallFailed) as stopped:
        hold_on_failed_checks(dict(FACTS), profile_for("0.7.3"), [], InstallOptions(), {}, PATHS)
    assert str(stopped.value) == "Failed preflight checks (1): chip; nothing was changed"
    assert stopped.value.hint.startswith("chip: vllm-ascend-0.7.3 does not list Atlas 300I Duo/Pro (310P).")


def test_an_admins_override_of_that_row_lets_it_run():
    request = {"preflight_overrides": {"chip": "tried on the bench first"}}
    hold_on_failed_checks(dict(FACTS), profile_for("0.7.3"), [], InstallOptions(), request, PATHS)


def test_a_host_that_passes_runs_without_overrides():
    hold_on_failed_checks({**FACTS, "chip": "910b"}, profile_for("0.7.3"), [], InstallOptions(), {}, PATHS)
