"""A check of NPU pairs (a disaggregated deployment's: workers/engine/launch/kv_pairs.py) on two simulated
A2 hosts on one switch: the agent's probe pings exactly the pairs its request names, from the prefill end,
and `failing_parts` says which NPUs, paths and nodes failed, so a check several engines wait for stops only
the ones concerned (panel/deployments/launch/fabric_gate.py)."""

import pytest

from tests.fabric_helpers import hosts_on_one_switch, runner_for
from workers.sim import fabric as sim_fabric
from workers.steps.fabric import probe_fabric
from workers.steps.fabric_verdict import failing_parts, judge


@pytest.fixture
def hosts(tmp_path):
    return hosts_on_one_switch(tmp_path, ("pd-p", "pd-d"), "10.4.0")


def requests(pairs: dict[str, list[int]]) -> dict[str, dict]:
    """The prefill host pings decode NPUs 0 and 1 on `pairs`; the decode host pings no NPU back."""
    devices = [0, 1]
    return {
        "pd-p": {
            "devices": devices,
            "peers": [
                {
                    "node": "pd-d",
                    "host_ip": "10.4.0.2",
                    "devices": devices,
                    "pairs": pairs,
                    "npu_ips": [sim_fabric.npu_ip("pd-d", device) for device in devices],
                },
            ],
            "if_ip": "10.4.0.1",
            "ifname": "eth0",
        },  # fmt: skip
        "pd-d": {
            "devices": devices,
            "peers": [
                {
                    "node": "pd-p",
                    "host_ip": "10.4.0.1",
                    "devices": devices,
                    "pairs": {},
                    "npu_ips": [sim_fabric.npu_ip("pd-p", device) for device in devices],
                },
            ],
            "if_ip": "10.4.0.2",
            "ifname": "eth0",
        },  # fmt: skip
    }


async def probe(hosts, pairs):
    asked = requests(pairs)
    return {
        name: await probe_fabric(runner_for(root), asked[name], str(root / "usr/local/Ascend"))
        for name, root in hosts.items()
    }


def targets(report):
    return {npu["device"]: [ping["target"] for ping in npu["pings"]] for npu in report["npus"]}


async def test_the_prefill_end_pings_exactly_the_pairs_named_and_the_decode_end_none(hosts):
    reports = await probe(hosts, {"0": [0, 1], "1": [1]})
    d0, d1 = sim_fabric.npu_ip("pd-d", 0), sim_fabric.npu_ip("pd-d", 1)
    assert targets(reports["pd-p"]) == {0: [d0, d1], 1: [d1]}
    assert targets(reports["pd-d"]) == {0: [], 1: []}
    assert reports["pd-d"]["interface"]["peers"][0]["loss_pct"] == 0.0  # the host interface both ways
    verdict = judge(reports)
    assert verdict["status"] == "pass", verdict["checklist"]
    assert failing_parts(verdict["nodes"], verdict["checklist"]) == {"nodes": [], "npus": [], "paths": []}


async def test_a_path_no_pair_names_is_not_pinged(hosts):
    sim_fabric.set_npu_unreachable(hosts["pd-p"], 1, sim_fabric.npu_ip("pd-d", 0))
    verdict = judge(await probe(hosts, {"0": [0], "1": [1]}))
    assert verdict["status"] == "pass", verdict["checklist"]


async def test_a_failing_path_between_sound_nics_is_a_path_and_a_downed_nic_is_the_npus_own(hosts):
    sim_fabric.set_npu_unreachable(hosts["pd-p"], 0, sim_fabric.npu_ip("pd-d", 1))
    sim_fabric.set_link(hosts["pd-d"], 0, up=False)
    verdict = judge(await probe(hosts, {"0": [0, 1], "1": [0, 1]}))
    assert verdict["status"] == "fail"
    # Pings to the downed NIC are its effect: only the path 0 -> 1 fails on its own.
    assert failing_parts(verdict["nodes"], verdict["checklist"]) == {
        "nodes": [],
        "npus": [["pd-d", 0]],
        "paths": [["pd-p", 0, "pd-d", 1]],
    }


async def test_a_host_whose_interface_is_down_is_the_failing_node_not_the_one_that_cannot_reach_it(hosts):
    sim_fabric.set_iface_up(hosts["pd-d"], False)
    verdict = judge(await probe(hosts, {"0": [0]}))
    where = failing_parts(verdict["nodes"], verdict["checklist"])
    assert where["nodes"] == ["pd-d"], verdict["checklist"]
