"""The sim host's hccn_tool, ip and ping, run as executables and read back with the agent's readers: two A2
hosts on one switch reach each other's NPUs and interfaces, and each injected fault shows where a real one
would."""

import subprocess
import sys
from pathlib import Path

import pytest

from workers.ascend.hccn import parse_one
from workers.sim import fabric
from workers.sim.tree import HCCN_TOOL, create_host

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def pair(tmp_path):
    roots = []
    for name in ("fab-a", "fab-b"):
        root = tmp_path / name
        create_host(root, "atlas-800i-a2", name)
        fabric.join_switch(root, tmp_path / "switch")
        roots.append(root)
    return roots


def hccn(root, *args):
    done = subprocess.run(
        [str(root / HCCN_TOOL), *args], capture_output=True, text=True, timeout=60, check=False
    )
    return done.returncode, done.stdout


def tool(root, name, *args):
    done = subprocess.run(
        [str(root / "bin" / name), *args], capture_output=True, text=True, timeout=60, check=False
    )
    return done.returncode, done.stdout


def ping_npu(root, logic_id, address):
    return parse_one(hccn(root, "-i", str(logic_id), "-ping", "-g", "address", address)[1], "ping")


def test_hccn_tool_is_where_the_driver_puts_it_and_not_on_path(pair):
    a, _ = pair
    assert (a / HCCN_TOOL).is_file()
    assert not (a / "bin" / "hccn_tool").exists()


def test_each_npu_has_an_address_link_health_tls_and_gateway(pair):
    a, _ = pair
    for query, key, value in (("-link", "link", "UP"), ("-net_health", "health", "Success")):
        status, out = hccn(a, "-i", "3", query, "-g")
        assert status == 0
        assert parse_one(out, query[1:])[key] == value
    ip = parse_one(hccn(a, "-i", "3", "-ip", "-g")[1], "ip")
    assert ip == {"ipaddr": fabric.npu_ip("fab-a", 3), "netmask": "255.255.255.0"}
    assert parse_one(hccn(a, "-i", "3", "-tls", "-g")[1], "tls") == {
        "device": 3, "tls_enabled": False, "preconfigured": True,
    }  # fmt: skip
    assert parse_one(hccn(a, "-i", "3", "-gateway", "-g")[1], "gateway")["iface"] == "eth3"
    assert fabric.npu_ip("fab-a", 3) != fabric.npu_ip("fab-b", 3)


def test_npus_of_two_hosts_on_one_switch_ping_each_other(pair):
    a, b = pair
    record = ping_npu(a, 0, fabric.npu_ip("fab-b", 0))
    assert record == {
        "device": 0,
        "target": fabric.npu_ip("fab-b", 0),
        "sent": 3,
        "received": 3,
        "loss_pct": 0.0,
    }
    assert ping_npu(a, 0, "10.99.99.99")["loss_pct"] == 100.0  # nobody on the switch has it


def test_link_down_no_ip_tls_and_ping_loss_show_as_on_a_real_host(pair):
    a, b = pair
    fabric.set_link(b, 2, up=False)
    fabric.set_ip(a, 5, present=False)
    fabric.set_tls(a, 6, enabled=True)
    fabric.set_ping_loss(a, 7, 34)

    assert parse_one(hccn(b, "-i", "2", "-link", "-g")[1], "link") == {"link": "DOWN"}
    assert parse_one(hccn(b, "-i", "2", "-net_health", "-g")[1], "net_health") == {"health": "Fault"}
    assert ping_npu(a, 2, fabric.npu_ip("fab-b", 2))["received"] == 0  # the far end's link is down
    status, out = hccn(a, "-i", "5", "-ip", "-g")
    assert status != 0
    assert parse_one(out, "ip")["error"] == "Get ipconf failed, because no ip was preset there!"
    assert ping_npu(a, 5, fabric.npu_ip("fab-b", 5))["loss_pct"] == 100.0  # no address to send from
    assert parse_one(hccn(a, "-i", "6", "-tls", "-g")[1], "tls")["tls_enabled"] is True
    assert ping_npu(a, 7, fabric.npu_ip("fab-b", 7)) | {"target": None} == {
        "device": 7, "target": None, "sent": 3, "received": 2, "loss_pct": 33.33,
    }  # fmt: skip


def test_the_host_interface_and_pings_between_hosts(pair):
    a, b = pair
    fabric.set_host(a, host_ip="10.1.0.1", ifname="enp189s0f0")
    fabric.set_host(b, host_ip="10.1.0.2")
    status, out = tool(a, "ip", "-o", "-4", "addr", "show")
    assert status == 0
    assert "2: enp189s0f0    inet 10.1.0.1/24 scope global enp189s0f0" in out
    assert "state UP" in tool(a, "ip", "-o", "link", "show")[1]
    status, out = tool(a, "ping", "-c", "3", "-W", "1", "-I", "enp189s0f0", "10.1.0.2")
    assert status == 0
    assert "3 packets transmitted, 3 received, 0% packet loss" in out

    fabric.set_iface_up(b, up=False)
    status, out = tool(a, "ping", "-c", "3", "-I", "enp189s0f0", "10.1.0.2")
    assert status == 1
    assert "100% packet loss" in out
    assert "state DOWN" in tool(b, "ip", "-o", "link", "show")[1]
    assert tool(a, "ping", "-c", "1", "-I", "eth9", "10.1.0.2")[0] == 2  # no such interface here


def test_faults_are_cleared_with_the_others_and_set_from_the_command_line(pair):
    a, _ = pair
    cli = [sys.executable, "-m", "workers.sim"]
    done = subprocess.run([*cli, "fabric", "--root", str(a), "--npu", "1", "--link-down", "--tls", "on"],
                          capture_output=True, text=True, cwd=REPO, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert parse_one(hccn(a, "-i", "1", "-link", "-g")[1], "link") == {"link": "DOWN"}
    subprocess.run([*cli, "fault", "--root", str(a), "--clear"], cwd=REPO, timeout=60, check=True)
    assert parse_one(hccn(a, "-i", "1", "-link", "-g")[1], "link") == {"link": "UP"}
    assert parse_one(hccn(a, "-i", "1", "-tls", "-g")[1], "tls")["tls_enabled"] is False
    done = subprocess.run([*cli, "fabric", "--root", str(a), "--npu", "99", "--no-ip"],
                          capture_output=True, text=True, cwd=REPO, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 1
    assert "no NPU with logic id 99" in done.stderr


def test_a_310p_card_has_no_roce_nic(tmp_path):
    create_host(tmp_path / "duo", "atlas-300i-duo", "duo")
    status, out = hccn(tmp_path / "duo", "-i", "0", "-ip", "-g")
    assert status == 1
    assert "failed" in out
