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
