"""The fabric check on two simulated A2 hosts on one switch: the probe reads each NPU's NIC, pings the
other host's NPUs and host interface through the real Runner and the sim's tools, and the verdict names
each injected fault with its fix."""

import asyncio
import os

import pytest

from tests.fabric_helpers import hosts_on_one_switch, runner_for, sim_path
from workers.hosts import LocalRunner
from workers.inventory import gather_inventory
from workers.sim import fabric as sim_fabric
from workers.steps.fabric import probe_fabric, read_interfaces
from workers.steps.fabric_verdict import first_failure, judge
from workers.tasks.fabric import fabric_body

DEVICES = [0, 1]  # two NPUs a host keep the sim tool calls (one process each) few


@pytest.fixture
def hosts(tmp_path):
    return hosts_on_one_switch(tmp_path, ("fab-head", "fab-tail"), "10.1.0")


def request_for(name, hosts, devices=DEVICES, ifname="eth0"):
    peers = [
        {
            "node": other,
            "host_ip": f"10.1.0.{list(hosts).index(other) + 1}",
            "npu_ips": [sim_fabric.npu_ip(other, device) for device in devices],
        }
        for other in hosts
        if other != name
    ]
    return {
        "devices": devices,
        "peers": peers,
        "if_ip": f"10.1.0.{list(hosts).index(name) + 1}",
        "ifname": ifname,
    }


async def check(hosts, **request_changes):
    reports = {}
    for name, root in hosts.items():
        request = {**request_for(name, hosts), **request_changes.get(name, {})}
        reports[name] = await probe_fabric(runner_for(root), request, str(root / "usr/local/Ascend"))
    return reports, judge(reports)


def failing(verdict):
    return [
        (entry["check"], entry["params"].get("node"))
        for entry in verdict["checklist"]
        if entry["status"] == "fail"
    ]


async def test_a_healthy_pair_passes_with_every_npu_reaching_its_peer(hosts):
    reports, verdict = await check(hosts)
    head = reports["fab-head"]
    assert head["hccn_tool"].endswith("usr/local/Ascend/driver/tools/hccn_tool")  # not on PATH
    assert [npu["device"] for npu in head["npus"]] == DEVICES
    assert head["npus"][1]["ip"] == sim_fabric.npu_ip("fab-head", 1)
    assert head["npus"][1]["pings"] == [
        {
            "node": "fab-tail",
            "target": sim_fabric.npu_ip("fab-tail", 1),
            "sent": 3,
            "received": 3,
            "loss_pct": 0.0,
        }
    ]
    assert head["interface"]["holds_ip"] is True
    assert head["interface"]["peers"] == [{"node": "fab-tail", "address": "10.1.0.2", "loss_pct": 0.0}]
    assert verdict["status"] == "pass"
    assert (
        verdict["checklist"][0]["detail"]
        == "4 NPUs on fab-head, fab-tail: addresses, links, health, TLS and pings OK"
    )
    assert {row["status"] for node in verdict["nodes"].values() for row in node["npus"]} == {"pass"}


async def test_an_npu_without_an_address_fails_with_the_command_that_sets_it(hosts):
    sim_fabric.set_ip(hosts["fab-tail"], 1, present=False)
    _, verdict = await check(hosts)
    assert verdict["status"] == "fail"
    problem = first_failure(verdict)
    assert (problem["check"], problem["detail"]) == (
        "npu_ip", "fab-tail: no IP address on NPU 1 (shown as -.-.-.- in rank tables)",
    )  # fmt: skip
    assert "hccn_tool -i <N> -ip -s address" in problem["fix"]
    row = verdict["nodes"]["fab-tail"]["npus"][1]
    assert (row["ip"], row["status"], row["problems"]) == (None, "fail", ["npu_ip"])


async def test_a_link_down_fails_there_and_the_peer_cannot_reach_it(hosts):
    sim_fabric.set_link(hosts["fab-tail"], 1, up=False)
    _, verdict = await check(hosts)
    assert ("npu_link", "fab-tail") in failing(verdict)
    assert ("npu_ping", "fab-head") in failing(verdict)
    ping = next(e for e in verdict["checklist"] if e["check"] == "npu_ping")
    assert ping["params"]["devices"] == "1"
    assert ping["params"]["targets"] == sim_fabric.npu_ip("fab-tail", 1)
    assert verdict["nodes"]["fab-head"]["npus"][1]["status"] == "fail"


async def test_tls_on_for_one_npu_is_a_mismatch_named_per_npu(hosts):
    sim_fabric.set_tls(hosts["fab-head"], 1, enabled=True)
    _, verdict = await check(hosts)
    problem = first_failure(verdict)
    assert problem["check"] == "npu_tls"
    assert (
        problem["detail"] == "TLS switch is 1 on fab-head NPU 1 and 0 on the other NPUs: they cannot connect"
    )
    assert "-tls -s enable 0" in problem["fix"]
    assert verdict["nodes"]["fab-head"]["npus"][1]["problems"] == ["npu_tls"]


async def test_partial_ping_loss_warns(hosts):
    sim_fabric.set_ping_loss(hosts["fab-head"], 0, 34)
    _, verdict = await check(hosts)
    assert verdict["status"] == "warn"
    lossy = next(e for e in verdict["checklist"] if e["check"] == "npu_ping")
    assert (lossy["status"], lossy["params"]["loss"]) == ("warn", 33.33)


async def test_the_hccl_interface_wrong_name_down_or_unreachable(hosts):
    _, verdict = await check(hosts, **{"fab-head": {"ifname": "enp189s0f0"}})
    problem = first_failure(verdict)
    assert problem["detail"] == "fab-head: no interface enp189s0f0 for HCCL_SOCKET_IFNAME"
    assert "eth0 holds it" in problem["fix"]

    sim_fabric.set_iface_up(hosts["fab-tail"], up=False)
    _, verdict = await check(hosts)
    assert ("hccl_interface", "fab-tail") in failing(verdict)
    reach = next(e for e in verdict["checklist"] if e["check"] == "hccl_reach")
    assert reach["detail"] == "fab-head cannot reach fab-tail at 10.1.0.2 over eth0"


async def test_hccl_if_ip_not_on_the_interface(hosts):
    _, verdict = await check(hosts, **{"fab-tail": {"if_ip": "10.9.9.9"}})
    assert first_failure(verdict)["detail"] == "fab-tail: eth0 does not hold HCCL_IF_IP 10.9.9.9"


async def test_a_host_without_hccn_tool_warns_and_pings_nothing(tmp_path):
    runner = LocalRunner(base_env={"PATH": "/nonexistent"})
    report = await probe_fabric(runner, {"devices": [0]}, str(tmp_path))
    assert report == {"hccn_tool": None, "npus": [], "interface": None}
    verdict = judge({"bare": report})
    assert verdict["status"] == "warn"
    assert verdict["checklist"][0]["check"] == "hccn_tool"


async def test_without_devices_every_npu_npu_smi_lists_is_read(hosts):
    root = hosts["fab-head"]
    report = await probe_fabric(runner_for(root), {}, str(root / "usr/local/Ascend"))
    assert [npu["device"] for npu in report["npus"]] == list(range(8))
    assert report["interface"] is None  # no peers and no HCCL interface asked for


def test_health_init_warns_and_other_health_fails():
    npu = {"device": 0, "ip": "10.0.0.1", "link": "UP", "tls_enabled": False, "pings": []}
    verdict = judge(
        {
            "a": {
                "hccn_tool": "hccn_tool",
                "npus": [{**npu, "health": "Init"}, {**npu, "device": 1, "health": "Receive timeout"}],
            }
        }
    )
    statuses = {(e["check"], e["status"]) for e in verdict["checklist"]}
    assert statuses == {("npu_health", "warn"), ("npu_health", "fail")}
    assert [row["status"] for row in verdict["nodes"]["a"]["npus"]] == ["warn", "fail"]


def test_interfaces_are_read_from_ip_one_line_output():
    addresses = (
        "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
        "3: enp189s0f0    inet 192.168.10.5/24 brd 192.168.10.255 scope global enp189s0f0\\       valid_lft\n"
        "4: bond0.100@bond0    inet 10.20.0.7/16 scope global bond0.100\\       valid_lft forever\n"
    )
    links = (
        "3: enp189s0f0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc mq state UP mode DEFAULT\n"
        "5: enp189s0f1: <NO-CARRIER,BROADCAST,MULTICAST,UP> mtu 1500 qdisc mq state DOWN mode DEFAULT\n"
    )
    assert read_interfaces(addresses, links) == {
        "lo": {"addresses": ["127.0.0.1"], "up": False},
        "enp189s0f0": {"addresses": ["192.168.10.5"], "up": True},
        "bond0.100": {"addresses": ["10.20.0.7"], "up": False},
        "enp189s0f1": {"addresses": [], "up": False},
    }


def test_the_install_preflight_lists_the_hosts_nic_findings(hosts, monkeypatch):
    from workers.agent_config import AgentConfig
    from workers.tasks.install import fabric_items

    root = hosts["fab-head"]
    sim_fabric.set_link(root, 4, up=False)
    monkeypatch.setenv("PATH", sim_path(root)["PATH"])
    config = AgentConfig(
        node_name="fab-head", host_root=str(root), ascend_root=str(root / "usr/local/Ascend")
    )
    items = fabric_items(config)
    assert [(entry["check"], entry["status"]) for entry in items] == [("npu_link", "fail")]
    assert items[0]["detail"] == "fab-head: the NIC link of NPU 4 is not UP"


async def test_a_second_round_only_pings_from_the_npus_it_names_and_its_log_judges_nothing(hosts):
    root = hosts["fab-head"]
    request = {**request_for("fab-head", hosts), "pings_only": [1]}
    report = await probe_fabric(runner_for(root), request, str(root / "usr/local/Ascend"))
    assert (report["pings_only"], report["interface"]) == (True, None)
    target = sim_fabric.npu_ip("fab-tail", 1)
    assert report["npus"] == [
        {
            "device": 1,
            "pings": [{"node": "fab-tail", "target": target, "sent": 3, "received": 3, "loss_pct": 0.0}],
        }
    ]

    class Emitter:
        lines: list[str] = []

        def progress(self, *args, **kwargs):
            pass

        def log(self, line):
            self.lines.append(line)

    class Config:
        node_name, ascend_root = "fab-head", str(root / "usr/local/Ascend")

        def runner(self):
            return runner_for(root)

    emitter = Emitter()
    body = fabric_body(request)
    result = await asyncio.to_thread(body, emitter, Config())
    assert result["report"]["pings_only"] is True
    assert emitter.lines == [
        f"NPU 1: ping fab-tail {target} 0.0% lost"
    ]  # no verdict on reads it did not make


async def test_the_host_interface_is_read_beside_the_npus_not_after_them(hosts):
    class Noted(LocalRunner):
        def __init__(self, notes, **kwargs):
            super().__init__(**kwargs)
            self.notes = notes

        async def run(self, argv, **kwargs):
            self.notes.append(("start", os.path.basename(argv[0])))
            try:
                return await super().run(argv, **kwargs)
            finally:
                self.notes.append(("end", os.path.basename(argv[0])))

    root, notes = hosts["fab-head"], []
    runner = Noted(notes, base_env=sim_path(root))
    report = await probe_fabric(runner, request_for("fab-head", hosts), str(root / "usr/local/Ascend"))
    assert report["interface"]["holds_ip"] is True
    first_ip = notes.index(("start", "ip"))
    last_hccn = max(at for at, note in enumerate(notes) if note == ("end", "hccn_tool"))
    assert first_ip < last_hccn, notes  # not one after the other: a round costs the longer, not the sum


async def test_the_inventory_reads_each_npus_roce_address_for_the_network_check(hosts):
    root = hosts["fab-head"]
    sim_fabric.set_ip(root, 3, present=False)
    found = await gather_inventory(runner_for(root), str(root), str(root / "usr/local/Ascend"))
    expected = {str(d): sim_fabric.npu_ip("fab-head", d) for d in range(8)}
    assert found["facts"]["npu_roce_ips"] == {**expected, "3": None}
