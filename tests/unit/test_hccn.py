"""The hccn_tool readers on answers as the field captures them: one device, or a loop over devices with
echo lines, indentation and `...` where the author cut lines. Lines whose exact form matters are kept in the
form the real tool prints (from Huawei's manuals and public issues); the layouts around them are ours."""

import io
import json

import pytest

from tests.unit.ascend_samples import read_sample, sample_names
from workers.ascend.hccn import HccnError, detect_query, hccn_argv, main, parse, parse_one

IP_LOOP = """\
# for i in 0 1 2 3; do hccn_tool -i $i -ip -g; done
ipaddr:29.3.102.82
netmask:255.255.0.0
ipaddr:29.3.102.83
netmask:255.255.0.0
Get ipconf failed, because no ip was preset there!
...
ipaddr:29.3.102.85
netmask:255.255.0.0
"""


def test_an_ip_loop_gives_one_record_per_device_and_names_the_missing_ip():
    assert parse(IP_LOOP) == [
        {"ipaddr": "29.3.102.82", "netmask": "255.255.0.0"},
        {"ipaddr": "29.3.102.83", "netmask": "255.255.0.0"},
        {"ipaddr": None, "netmask": None, "error": "Get ipconf failed, because no ip was preset there!"},
        {"ipaddr": "29.3.102.85", "netmask": "255.255.0.0"},
    ]


def test_the_older_wording_of_a_missing_ip_is_read_as_one_too():
    (record,) = parse("Get ip failed, because no ip was preset there!\n", "ip")
    assert record["ipaddr"] is None
    assert "no ip was preset" in record["error"]


def test_a_netmask_whose_ipaddr_line_was_cut_is_its_own_record():
    assert parse("ipaddr:10.0.0.1\nnetmask:255.255.255.0\n...\nnetmask:255.255.255.0\n") == [
        {"ipaddr": "10.0.0.1", "netmask": "255.255.255.0"},
        {"ipaddr": None, "netmask": "255.255.255.0"},
    ]


def test_link_and_health_loops_with_banner_lines_between_devices():
    link = "===== NPU 0 =====\n    link status: UP\n===== NPU 1 =====\n    link status: DOWN\n"
    assert detect_query(link) == "link"
    assert parse(link) == [{"link": "UP"}, {"link": "DOWN"}]
    health = "net health status: Success\nnet health status: Init\n...\nnet health status: Fault\n"
    assert parse(health) == [{"health": "Success"}, {"health": "Init"}, {"health": "Fault"}]


def test_a_clean_ping_reads_device_target_and_no_loss():
    text = (
        "root@node-a:~# hccn_tool -i 0 -ping -g address 10.10.100.10\n"
        "device 0 PING 10.10.100.10\n"
        "recv seq=0,time=0.067000ms\n"
        "recv seq=1,time=0.049000ms\n"
        "recv seq=2,time=0.047000ms\n"
        "3 packets transmitted, 3 received, 0.00% packet loss\n"
    )
    assert parse(text) == [{"device": 0, "target": "10.10.100.10", "sent": 3, "received": 3, "loss_pct": 0.0}]


def test_a_lossy_ping_without_its_head_line_keeps_the_counts_and_no_names():
    text = "recv time out seq=0\nrecv seq=1,time=0.097000ms\nrecv seq=2,time=0.066000ms\n"
    text += "3 packets transmitted, 2 received, 33.33% packet loss\n"
    (record,) = parse(text)
    assert record == {"device": None, "target": None, "sent": 3, "received": 2, "loss_pct": 33.33}
    assert isinstance(record["loss_pct"], float)


def test_a_ping_loop_whose_summary_was_cut_counts_the_replies_it_shows():
    text = (
        "device 3 PING 192.168.4.13\nrecv time out seq=0\nrecv time out seq=1\n...\n"
        "device 4 PING 192.168.4.14\nrecv seq=0,time=0.05ms\n"
        "3 packets transmitted, 3 received, 0.00% packet loss\n"
    )
    assert parse(text, "ping") == [
        {"device": 3, "target": "192.168.4.13", "sent": 2, "received": 0, "loss_pct": 100.0},
        {"device": 4, "target": "192.168.4.14", "sent": 3, "received": 3, "loss_pct": 0.0},
    ]


def test_tls_lines_with_and_without_the_preconfigured_field_and_cert_lines_between():
    text = (
        "dev_id:0, tls switch[0](0:disable, 1:enable), tls preconfigured[1](0:non-preset, 1:preset), "
        "tls alarm time threshold[60]days\n"
        "dev_id:0, [pub cert] info:\n"
        "         issuer[/C=CN/ST=GD/O=ORG/CN=CA]\n"
        "dev_id:1, tls switch[1](0:disable, 1:enable), tls alarm time threshold[60]days\n"
    )
    assert detect_query(text) == "tls"
    assert parse(text) == [
        {"device": 0, "tls_enabled": False, "preconfigured": True},
        {"device": 1, "tls_enabled": True, "preconfigured": None},
    ]


def test_gateway_lines_and_a_device_without_one():
    text = (
        "default gateway:11.12.165.1, Iface:eth0\n"
        "Get gateway failed, because no gateway was preset there!\n"
        "default gateway:11.12.165.1, Iface:eth2\n"
    )
    assert parse(text) == [
        {"gateway": "11.12.165.1", "iface": "eth0"},
        {"gateway": None, "iface": None, "error": "Get gateway failed, because no gateway was preset there!"},
        {"gateway": "11.12.165.1", "iface": "eth2"},
    ]


@pytest.mark.parametrize(
    ("text", "query", "records"),
    [
        ("netdetect address: 11.12.165.1\nnetdetect address: 0.0.0.0\n", "netdetect",
         [{"address": "11.12.165.1"}, {"address": "0.0.0.0"}]),  # noqa: S104
        ("fec mode: rs FEC mode\n", "fec", [{"mode": "rs FEC mode"}]),
        ("Chassis ID TLV\n\tMAC: 00:11:22:33:44:55\nPort ID TLV\n\tIfname: 100GE1/0/3\n", "lldp",
         [{"ifname": "100GE1/0/3"}]),
        ("vnic link status: UP\nvnic ipaddr: 192.0.2.10\nvnic netmask: 255.255.255.0\n", "vnic",
         [{"link": "UP", "ipaddr": "192.0.2.10", "netmask": "255.255.255.0"}]),
        ("[device 0]current time        : Wed Jun  7 10:08:28 2023\n[device 0]link up count       : 2\n",
         "link_stat", [{"device": 0, "link_up_count": 2, "link_down_count": None, "down_for_s": None}]),
    ],
)  # fmt: skip
def test_the_other_queries(text, query, records):
    assert detect_query(text) == query
    assert parse(text) == records


def test_a_vnic_answer_is_not_taken_for_the_roce_link():
    assert detect_query("vnic link status: DOWN\n") == "vnic"


def test_text_without_an_answer_raises():
    with pytest.raises(HccnError, match="no hccn_tool answer"):
        parse("hccn_tool: command not found\n")
    with pytest.raises(HccnError, match="-tls -g"):
        parse("link status: UP\n", "tls")


def test_parse_one_takes_the_answer_of_one_device():
    assert parse_one("link status: UP\n", "link") == {"link": "UP"}


def test_argv_of_each_query_and_the_ping_target_is_checked():
    assert hccn_argv("ip", 3) == ["hccn_tool", "-i", "3", "-ip", "-g"]
    assert hccn_argv("net_health", 0, binary="/t/hccn_tool") == [
        "/t/hccn_tool",
        "-i",
        "0",
        "-net_health",
        "-g",
    ]
    assert hccn_argv("ping", 1, "10.0.0.2") == ["hccn_tool", "-i", "1", "-ping", "-g", "address", "10.0.0.2"]
    with pytest.raises(ValueError, match="IP address"):
        hccn_argv("ping", 1, "10.0.0.2; reboot")
    with pytest.raises(ValueError, match="non-negative"):
        hccn_argv("ip", -1)
    with pytest.raises(ValueError, match="unknown"):
        hccn_argv("reset", 0)


def test_the_cli_prints_query_and_records(tmp_path, capsys):
    capture = tmp_path / "ip.txt"
    capture.write_text(IP_LOOP)
    assert main([str(capture)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["query"] == "ip"
    assert [r["ipaddr"] for r in printed["records"]] == ["29.3.102.82", "29.3.102.83", None, "29.3.102.85"]


def test_the_cli_reads_stdin_takes_a_query_and_exits_2_without_an_answer(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("link status: DOWN\n"))
    assert main(["-", "--query", "link"]) == 0
    assert json.loads(capsys.readouterr().out) == {"query": "link", "records": [{"link": "DOWN"}]}
    monkeypatch.setattr("sys.stdin", io.StringIO("nothing here\n"))
    assert main(["-"]) == 2
    assert "no hccn_tool answer" in capsys.readouterr().err


HCCN_SAMPLES = sample_names("hccn*.txt")


@pytest.mark.parametrize(
    "name", HCCN_SAMPLES or [pytest.param("", marks=pytest.mark.skip(reason="no hccn_tool samples"))]
)
def test_hccn_samples_read_to_records_of_their_query(name):
    text = read_sample(name)
    query = detect_query(text)
    assert query is not None
    assert parse(text, query)


OTHER_SAMPLES = [name for name in sample_names("*.txt") if not name.startswith("hccn")]


@pytest.mark.parametrize(
    "name", OTHER_SAMPLES or [pytest.param("", marks=pytest.mark.skip(reason="no Ascend samples folder"))]
)
def test_other_ascend_outputs_are_not_taken_for_hccn_answers(name):
    assert detect_query(read_sample(name)) is None


LINK_STAT_DOWN = """\
[devid 5]current time        : Mon Mar  2 09:15:40 2026
[devid 5]link up count       : 3
[devid 5]link down count     : 3
[devid 5]link change records :
[devid 5]    Mon Mar  2 09:14:58 2026    LINK DOWN
[devid 5]    Sun Mar  1 22:01:07 2026    LINK UP
[devid 5]    Sun Mar  1 22:01:03 2026    LINK DOWN
"""


def test_link_stat_says_how_long_a_port_that_is_down_has_been_down_by_the_devices_clock():
    """Newer drivers prefix `[devid N]` and list the changes newest first: the port went down 42 s before the
    device's current time, which MindCluster's 30 s link-down rule is measured against."""
    assert detect_query(LINK_STAT_DOWN) == "link_stat"
    assert parse(LINK_STAT_DOWN) == [
        {"device": 5, "link_up_count": 3, "link_down_count": 3, "down_for_s": 42.0}
    ]
    back_up = LINK_STAT_DOWN.replace(
        "link change records :\n", "link change records :\n[devid 5]    Mon Mar  2 09:15:20 2026    LINK UP\n"
    )
    assert parse(back_up)[0]["down_for_s"] is None
