"""The sim host answers `npu-smi info -t topo` as the real tool lays it out; the inventory reads the matrix
into the node's facts (or None where the driver has no topo query), and the node page shapes it."""

import subprocess

import pytest

from panel.nodes.presentation import topology_view
from workers.ascend.npu_smi import parse_topo
from workers.hosts.local import LocalRunner
from workers.inventory import read_topology
from workers.sim.profiles import PROFILES
from workers.sim.tree import create_host


def topo_of(root) -> dict:
    answer = subprocess.run(
        [str(root / "bin" / "npu-smi"), "info", "-t", "topo"], capture_output=True, text=True, timeout=30
    )
    assert answer.returncode == 0, answer.stdout
    return parse_topo(answer.stdout)


def test_an_a2_is_a_full_hccs_mesh_with_each_npus_numa_cpus(tmp_path):
    create_host(tmp_path, "atlas-800i-a2")
    topo = topo_of(tmp_path)
    assert topo["devices"] == [f"NPU{n}" for n in range(8)]
    assert {topo["links"]["NPU0"][other] for other in topo["devices"][1:]} == {"HCCS"}
    assert topo["links"]["NPU3"]["NPU3"] == "X"
    cpus_of_node = {node.node_id: node.cpulist for node in PROFILES["atlas-800i-a2"].numa_nodes}
    assert topo["cpu_affinity"] == {
        f"NPU{chip.phy_id}": cpus_of_node[chip.numa_node] for chip in PROFILES["atlas-800i-a2"].chips
    }


def test_the_a3_dies_of_one_npu_are_linked_by_sio_and_print_no_affinity(tmp_path):
    create_host(tmp_path, "atlas-800-a3")
    topo = topo_of(tmp_path)
    assert len(topo["devices"]) == 16
    assert topo["devices"][0] == "Phy-ID0"
    assert (topo["links"]["Phy-ID0"]["Phy-ID1"], topo["links"]["Phy-ID0"]["Phy-ID2"]) == ("SIO", "HCCS")
    assert topo["cpu_affinity"] == {}


def test_duo_cards_link_their_two_chips_by_one_bridge_and_other_cards_by_pcie(tmp_path):
    create_host(tmp_path, "atlas-300i-duo")
    topo = topo_of(tmp_path)
    links = topo["links"]
    assert links["NPU0"]["NPU1"] == "PIX"
    assert set(links["NPU0"].values()) <= {"X", "PIX", "PHB", "SYS"}
    assert "SYS" in links["NPU0"].values()


async def test_the_inventory_reads_the_matrix_and_a_driver_without_one_gives_none(tmp_path, monkeypatch):
    create_host(tmp_path, "atlas-800i-a2")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    topology = await read_topology(LocalRunner())
    assert topology["links"]["NPU0"]["NPU7"] == "HCCS"
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no npu-smi at all
    assert await read_topology(LocalRunner()) is None


def test_the_page_colours_each_link_and_lists_only_the_kinds_it_shows():
    view = topology_view(
        {
            "devices": ["NPU0", "NPU1", "NPU2"],
            "links": {
                "NPU0": {"NPU0": "X", "NPU1": "PIX", "NPU2": "SYS"},
                "NPU1": {"NPU0": "PIX", "NPU1": "X", "NPU2": "SYS"},
                "NPU2": {"NPU0": "SYS", "NPU1": "SYS", "NPU2": "X"},
            },
            "cpu_affinity": {"NPU0": "0-31"},
        }
    )
    assert [cell["colour"] for cell in view["rows"][0]["cells"]] == ["self", "warning", "alarm"]
    assert [kind["link"] for kind in view["legend"]] == ["PIX", "SYS"]
    assert (view["has_affinity"], view["rows"][2]["affinity"]) == (True, "")


@pytest.mark.parametrize("reported", [None, {}, {"links": "HCCS"}, ["NPU0"], "X"])
def test_a_missing_or_malformed_matrix_shows_no_card(reported):
    assert topology_view(reported) is None


def test_a_cell_the_node_left_out_reads_unknown():
    view = topology_view({"devices": ["NPU0", "NPU1"], "links": {"NPU0": {"NPU0": "X"}}})
    assert [cell["link"] for cell in view["rows"][0]["cells"]] == ["X", "NA"]
    assert [cell["link"] for cell in view["rows"][1]["cells"]] == ["NA", "NA"]
