"""The metrics sampler against simulated hosts, through real npu-smi subprocesses."""

import os
import threading

import pytest

from workers.agent_config import AgentConfig
from workers.contracts import MetricBatch
from workers.health_probe import HealthProbe
from workers.sampler import Sampler, current_interval, run_command, sampler_loop, set_interval
from workers.sim import state as sim_state
from workers.sim.tree import create_host


@pytest.fixture
def sim(tmp_path, monkeypatch):
    def make(profile="atlas-800i-a2"):
        root = tmp_path / profile
        create_host(root, profile, "unit-node")
        monkeypatch.setenv("ASCEND_PANEL_SIM_ROOT", str(root))
        monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
        return root

    return make


def counting(calls):
    def run(argv, timeout):
        calls.append(argv)
        return run_command(argv, timeout)

    return run


def test_it_reads_every_chip_of_an_a2_with_logic_ids_hbm_and_host_figures(sim):
    sim()
    sample = Sampler().sample()
    assert sample.error is None
    assert [(n.npu_id, n.chip_id, n.logic_id) for n in sample.npus] == [(i, 0, i) for i in range(8)]
    first = sample.npus[0]
    assert first.health == "OK"
    assert first.name == "910B3"
    assert first.hbm_total_mb == 65536
    assert 0 < first.hbm_used_mb < 65536
    assert first.memory_total_mb is None
    assert first.memory_used_mb is None
    assert 0 < first.power_w < 400
    assert 20 < first.temp_c < 100
    assert sample.host.memory_total_mb > sample.host.memory_used_mb > 0


def test_it_reads_ddr_memory_and_both_chips_of_a_310p_duo(sim):
    sim("atlas-300i-duo")
    sample = Sampler().sample()
    assert sample.error is None
    chips = {(n.npu_id, n.chip_id) for n in sample.npus}
    assert len(chips) == len(sample.npus)
    assert {c for _, c in chips} == {0, 1}
    assert all(n.memory_total_mb and n.hbm_total_mb is None for n in sample.npus)
    assert all(n.logic_id is not None for n in sample.npus)


def test_processes_holding_a_chip_are_attached_to_that_chip(sim):
    root = sim()
    sim_state.hold(root, os.getpid(), [3], 20000, "vllm-engine", load_fraction=0.5)
    npus = {n.npu_id: n for n in Sampler().sample().npus}
    assert [p["pid"] for p in npus[3].processes] == [os.getpid()]
    assert npus[3].processes[0]["memory_mb"] == 20000
    assert npus[3].aicore_pct > 0
    assert npus[2].processes == []


def test_a_driver_failure_is_sent_as_the_sample_error_with_its_hint(sim):
    root = sim()
    sim_state.set_driver_unloaded(root)
    sample = Sampler().sample()
    assert sample.npus == []
    assert "-8005" in sample.error
    assert "/dev/davinci" in sample.error
    assert sample.host.cpu_pct >= 0


def test_a_host_without_npu_smi_sends_host_figures_only():
    sample = Sampler(run=lambda argv, timeout: run_command(["no-such-npu-smi-here"], timeout)).sample()
    assert sample.npus == []
    assert sample.error is None
    assert sample.host.memory_total_mb > 0


def test_logic_ids_are_read_once_until_the_chip_set_changes(sim):
    sim()
    calls = []
    sampler = Sampler(run=counting(calls))
    for _ in range(3):
        sampler.sample()
    assert calls.count(["npu-smi", "info", "-m"]) == 1
    assert calls.count(["npu-smi", "info"]) == 3


def test_the_loop_sends_numbered_batches_at_the_interval_until_stopped(sim):
    sim()
    sent: list[MetricBatch] = []
    stop = threading.Event()

    def send(batch):
        sent.append(batch)
        if len(sent) == 3:
            stop.set()

    config = AgentConfig(node_name="unit-node", metrics_s=0.2)
    worker = threading.Thread(target=sampler_loop, args=(config, stop, send))
    worker.start()
    worker.join(20)
    assert not worker.is_alive()
    assert [b.seq for b in sent] == [1, 2, 3]
    assert all(b.node == "unit-node" and len(b.samples) == 1 and len(b.samples[0].npus) == 8 for b in sent)
    times = [b.samples[0].time for b in sent]
    gaps = [(later - earlier).total_seconds() for earlier, later in zip(times, times[1:], strict=False)]
    # Stamps are taken as a sample starts, so the cadence holds them at least an interval apart. No upper
    # bound: a sample is real npu-smi subprocesses, which a loaded 2-core machine can hold for seconds.
    assert all(gap >= 0.15 for gap in gaps), gaps
    # What goes over the wire validates on the panel side.
    wire = MetricBatch.model_validate(sent[0].model_dump(mode="json"))
    assert wire.samples[0].npus[0].hbm_total_mb == 65536


def test_the_panel_can_change_the_interval_but_not_below_the_floor(monkeypatch):
    monkeypatch.setattr("workers.sampler._interval_override", None)
    assert current_interval(1.0) == 1.0
    assert set_interval(2.5) == 2.5
    assert current_interval(1.0) == 2.5
    with pytest.raises(ValueError, match="at least"):
        set_interval(0.01)
    assert current_interval(1.0) == 2.5


def test_the_health_probe_carries_codes_ecc_links_and_a_chip_that_is_gone(sim, monkeypatch):
    root = sim()
    monkeypatch.setenv("ASCEND_PANEL_ASCEND_ROOT", str(root / "usr/local/Ascend"))
    clock = [0.0]
    sampler = Sampler(probe=HealthProbe(run_command, every_s=15, clock=lambda: clock[0], background=False))
    first = sampler.sample().npus
    assert first[0].probe.error_codes == []
    assert first[0].probe.ecc.hbm_double == 0
    assert (first[0].probe.link, first[0].probe.link_up_count) == ("UP", 1)

    sim_state.add_ecc_errors(root, 2, 0, double=2)
    sim_state.set_chip_gone(root, 6, 0)
    clock[0] = 1.0  # no probe due; chip 2's health word changed, so it alone is probed now
    second = {n.npu_id: n for n in sampler.sample().npus}
    assert second[0].probe is None
    assert (second[2].health, second[2].probe.ecc.hbm_double, second[2].probe.error_codes) == (
        "Warning",
        2,
        ["80E18400"],
    )
    assert second[6].probe.gone
    assert second[6].health == "UNKNOWN"
