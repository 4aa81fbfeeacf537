"""The health probe's schedule against a sim host, through real npu-smi and hccn_tool subprocesses: a sweep
reads only what can say something new, a port that goes down is looked at again within seconds and carries
how long it has been down by the device's own records, and the policy's 30 s link rule counts from there."""

import os

import pytest

from panel.nodes.health import npu_health
from workers.health_probe import HealthProbe
from workers.sampler import Sampler, run_command
from workers.sim import fabric
from workers.sim.tree import create_host


@pytest.fixture
def a2(tmp_path, monkeypatch):
    root = tmp_path / "a2"
    create_host(root, "atlas-800i-a2", "probe-node")
    monkeypatch.setenv("ASCEND_PANEL_SIM_ROOT", str(root))
    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ASCEND_PANEL_ASCEND_ROOT", str(root / "usr/local/Ascend"))
    return root


def sampler_on(clock: list[float], calls: list[list[str]]) -> Sampler:
    def run(argv, timeout):
        calls.append(argv)
        return run_command(argv, timeout)

    probe = HealthProbe(run, every_s=20, clock=lambda: clock[0], background=False, watch_s=3, slow_s=60)
    return Sampler(run=run, probe=probe)


def probe_reads(calls: list[list[str]]) -> list[str]:
    """The probe's queries (the sample's own npu-smi table left out), as `<tool> <query>`."""
    reads = []
    for argv in calls:
        tool = os.path.basename(argv[0])
        if tool == "npu-smi" and "-t" in argv:
            reads.append(f"npu-smi {argv[argv.index('-t') + 1]}")
        elif tool == "hccn_tool":
            reads.append(f"hccn_tool {argv[3]}")
    return reads


def test_a_sweep_of_healthy_chips_reads_only_their_ecc_and_ports_and_the_rest_when_slow_reads_are_due(a2):
    clock, calls = [0.0], []
    sampler = sampler_on(clock, calls)
    first = sampler.sample().npus
    assert sorted(set(probe_reads(calls))) == [
        "hccn_tool -link",
        "hccn_tool -link_stat",
        "npu-smi ecc",
        "npu-smi health",
    ]
    assert len(probe_reads(calls)) == 8 * 4
    calls.clear()
    clock[0] = 21.0
    second = sampler.sample().npus
    assert sorted(probe_reads(calls)) == sorted(["npu-smi ecc", "hccn_tool -link"] * 8)
    # What was not read again stands as last read, so the policy sees no change.
    assert [n.probe.error_codes for n in second] == [n.probe.error_codes for n in first]
    assert [n.probe.link_up_count for n in second] == [1] * 8
    calls.clear()
    clock[0] = 61.0
    sampler.sample()
    assert len(probe_reads(calls)) == 8 * 4


def test_a_port_that_goes_down_is_probed_again_within_seconds_with_its_down_time_and_alone(a2):
    clock, calls = [0.0], []
    sampler = sampler_on(clock, calls)
    sampler.sample()
    fabric.set_link(a2, 3, up=False)
    clock[0] = 21.0  # the next sweep sees it
    seen = {n.npu_id: n.probe for n in sampler.sample().npus}
    assert seen[3].link == "DOWN"
    assert seen[3].link_down_s is not None
    assert seen[3].link_down_s >= 0
    calls.clear()
    clock[0] = 24.0  # watched: probed again after 3 s, while the others wait for the next sweep
    again = {n.npu_id: n.probe for n in sampler.sample().npus}
    assert [npu for npu, probe in again.items() if probe is not None] == [3]
    assert again[3].link == "DOWN"
    assert "hccn_tool -link_stat" in probe_reads(calls)
    fabric.set_link(a2, 3, up=True)
    clock[0] = 27.0
    back = {n.npu_id: n.probe for n in sampler.sample().npus}
    assert (back[3].link, back[3].link_up_count, back[3].link_down_s) == ("UP", 2, None)


def test_the_link_rule_counts_the_down_time_the_device_recorded_not_the_panels_first_look():
    chip = {"health": "OK", "probe": {"link": "DOWN", "link_up_count": 1, "link_down_s": 31.0}}
    memory, verdict = npu_health.observe({}, chip, now=1000.0)
    assert (verdict.state, verdict.signal) == ("failed", "link_down")
    fresh = {"health": "OK", "probe": {"link": "DOWN", "link_up_count": 1, "link_down_s": 5.0}}
    memory, verdict = npu_health.observe({}, fresh, now=1000.0)
    assert verdict.state == "suspect"
    later = {"health": "OK", "probe": {"link": "DOWN", "link_up_count": 1, "link_down_s": 30.5}}
    assert npu_health.observe(memory, later, now=1025.5)[1].state == "failed"
    # Without the device's record (an older driver), the panel's first look starts the 30 s.
    memory, verdict = npu_health.observe({}, {"health": "OK", "probe": {"link": "DOWN"}}, now=1000.0)
    assert (
        npu_health.observe(memory, {"health": "OK", "probe": {"link": "DOWN"}}, now=1029.0)[1].state
        == "suspect"
    )


def loaded_sampler(clock: list[float], reads: list, busy_until: list[float], watch_s: float = 3) -> Sampler:
    """A sampler whose probe commands take 1 s of the fake clock each while it is before `busy_until[0]`
    (a loaded host; none after, so a probe round ends). `reads` gets (when each began, `<query> <id>`)."""

    def run(argv, timeout):
        read = probe_reads([argv])
        if read:
            reads.append((clock[0], f"{read[0]} {argv[argv.index('-i') + 1]}"))
            if clock[0] < busy_until[0]:
                clock[0] += 1.0
        return run_command(argv, timeout)

    probe = HealthProbe(run, every_s=20, clock=lambda: clock[0], background=False, watch_s=watch_s, slow_s=60)
    return Sampler(run=run, probe=probe)


def test_a_watched_port_is_looked_at_before_the_sweep_and_alone_on_a_loaded_host(a2):
    clock, reads, busy_until = [0.0], [], [0.0]
    sampler = loaded_sampler(clock, reads, busy_until)
    sampler.sample()
    fabric.set_link(a2, 5, up=False)
    clock[0] = 21.0
    sampler.sample()  # the sweep sees the port down: watched from now on
    reads.clear()
    clock[0], busy_until[0] = 41.0, 60.0  # the sweep of all eight NPUs is due, the watched port since 24
    sampler.sample()
    port_reads = [when for when, read in reads if read == "hccn_tool -link 5"]
    # First, not after the sweep's five NPUs of lower numbers (ten seconds at 1 s a command).
    assert reads[0][1].endswith(" 5")
    # Looked at again within its 3 s plus the NPU in hand (2 reads) and its own reads, all through the sweep.
    assert all(
        later - earlier <= 3 + 2 + 3 for earlier, later in zip(port_reads, port_reads[1:], strict=False)
    )
    assert len(port_reads) >= 3
    # A look again reads the port alone: the NPU's ECC counters once, with the sweep.
    assert [read for _when, read in reads].count("npu-smi ecc 5") == 1


def test_a_down_port_carries_its_down_time_as_of_the_sample_not_of_its_read(a2):
    clock, reads, busy_until = [0.0], [], [0.0]
    sampler = loaded_sampler(clock, reads, busy_until, watch_s=60)  # read once in this sample
    sampler.sample()
    fabric.set_link(a2, 0, up=False)
    clock[0], busy_until[0] = 21.0, 100.0
    seen = {n.npu_id: n.probe for n in sampler.sample().npus}
    # NPU 0's port was read first; the seven other NPUs' reads took 14 s more before the sample went out.
    read_at = max(when for when, read in reads if read == "hccn_tool -link_stat 0") + 1.0
    assert clock[0] - read_at >= 14
    assert seen[0].link == "DOWN"
    assert seen[0].link_down_s >= clock[0] - read_at
