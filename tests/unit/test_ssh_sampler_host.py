"""Host figures of an SSH node come from one `cat` of /proc/loadavg, /proc/meminfo and /proc/stat; read here
from this machine's /proc and checked against psutil, which reads the same files its own way."""

from pathlib import Path

import psutil
import pytest

from workers.ssh_sampler import HOST_FILES, SshProbeFailed, cpu_times, parse_host_files

MB = 1024 * 1024


def this_machine() -> str:
    return "".join(Path(name).read_text() for name in HOST_FILES)


def test_memory_and_load_match_what_psutil_reads():
    load1, used_mb, total_mb, _cpu = parse_host_files(this_machine())
    assert total_mb == pytest.approx(psutil.virtual_memory().total / MB, abs=1)
    assert 0 < used_mb < total_mb
    assert load1 >= 0


def test_cpu_times_count_idle_and_iowait_as_idle():
    total, idle = cpu_times("cpu  100 5 50 800 20 3 2 0 7 0")
    assert total == 100 + 5 + 50 + 800 + 20 + 3 + 2 + 0  # guest time is inside user already
    assert idle == 800 + 20


def test_cpu_times_of_this_machine_grow():
    first = parse_host_files(this_machine())[3]
    sum(range(2_000_000))  # some work between the two readings
    second = parse_host_files(this_machine())[3]
    assert second[0] >= first[0]
    assert second[1] >= first[1]


def test_output_that_is_not_proc_is_a_failed_probe():
    with pytest.raises(SshProbeFailed, match="unexpected contents"):
        parse_host_files("sh: cat: not found\n")
