"""hccn_tool: the argv of the queries the agent runs and readers for what they print.

hccn_tool (in the driver package, /usr/local/Ascend/driver/tools/hccn_tool) configures and queries the RoCE
NIC of each NPU, the network HCCL uses between hosts. Admins usually capture it in a loop over the devices
(`for i in {0..7}; do hccn_tool -i $i -ip -g; done`), sometimes with `...` where they cut lines, so one text
holds a list of records: the readers return one record per device answer, in order.

    records = parse(text, "ip")       # [{"ipaddr": "10.0.0.10", "netmask": "255.255.255.0"}, ...]
    query = detect_query(text)        # "ip", "link", ... or None

Records per query (values as printed; numbers as numbers):
    ip          {"ipaddr", "netmask"}; both None plus "error" when no IP is set on the device
    link        {"link": "UP" | "DOWN"}
    net_health  {"health": "Success" | "Init" | "Fault" | ...}
    ping        {"device", "target", "sent", "received", "loss_pct"} (device and target None when the
                `device N PING X` line is missing; loss_pct a float)
    tls         {"device", "tls_enabled", "preconfigured"} (booleans; preconfigured None on drivers that
                do not print it)
    gateway     {"gateway", "iface"}; both None plus "error" when no gateway is set
    netdetect   {"address"};  fec {"mode"};  lldp {"ifname"} (the switch port);
    vnic        {"link", "ipaddr", "netmask"} (A3's on-board NIC)
    link_stat   {"device", "link_up_count", "link_down_count", "down_for_s"}: down_for_s is how long the port
                has been down by the device's own clock (its `current time` minus its newest LINK DOWN record)
                when that record is the newest change, else None; link_down_count None where not printed

`python -m workers.ascend.hccn FILE [--query Q]` prints {"query": Q, "records": [...]} as JSON (FILE - is
stdin); a text in which no query is recognised exits 2.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from datetime import datetime

HCCN_TOOL = "hccn_tool"
# Where the driver package puts it; it is often not on PATH.
HCCN_TOOL_IN_DRIVER = "driver/tools/hccn_tool"

QUERIES = (
    "ip",
    "link",
    "net_health",
    "ping",
    "tls",
    "gateway",
    "netdetect",
    "fec",
    "lldp",
    "vnic",
    "link_stat",
)

_IPADDR = re.compile(r"^ipaddr\s*:\s*(?P<value>\S+)", re.I)
_NETMASK = re.compile(r"^netmask\s*:\s*(?P<value>\S+)", re.I)
# Older drivers say "Get ip failed", newer ones "Get ipconf failed"; both mean no address on the device.
_IP_ERROR = re.compile(r"^Get ip(?:conf)? failed\b.*", re.I)
_LINK = re.compile(r"^link status\s*:\s*(?P<value>\w+)", re.I)
_HEALTH = re.compile(r"^net health status\s*:\s*(?P<value>.+?)\s*$", re.I)
_HEALTH_ERROR = re.compile(r"^Get device health status failed\b.*", re.I)
_PING_HEAD = re.compile(r"^device\s+(?P<device>\d+)\s+PING6?\s+(?P<target>\S+)", re.I)
_PING_REPLY = re.compile(r"^recv\s+seq\s*=", re.I)
_PING_LOST = re.compile(r"^(?:recv time out|pkt send fail)\s+seq", re.I)
_PING_SUMMARY = re.compile(
    r"(?P<sent>\d+)\s+packets? transmitted,\s*(?P<received>\d+)\s+(?:packets? )?received,\s*"
    r"(?P<loss>\d+(?:\.\d+)?)%\s+packet loss",
    re.I,
)
_TLS = re.compile(r"dev_id\s*:\s*(?P<device>\d+)\s*,\s*tls switch\[(?P<switch>\d)\]", re.I)
_TLS_PRESET = re.compile(r"tls preconfigured\[(?P<preset>\d)\]", re.I)
_GATEWAY = re.compile(r"^default gateway\s*:\s*(?P<gateway>[^,\s]+)\s*,\s*Iface\s*:\s*(?P<iface>\S+)", re.I)
_GATEWAY_ERROR = re.compile(r"^Get gateway failed\b.*", re.I)
_NETDETECT = re.compile(r"^netdetect address\s*:\s*(?P<value>\S+)", re.I)
_FEC = re.compile(r"^fec mode\s*:\s*(?P<value>.+?)\s*$", re.I)
_LLDP = re.compile(r"^Ifname\s*:\s*(?P<value>\S+)", re.I)
_VNIC_LINK = re.compile(r"^vnic link status\s*:\s*(?P<value>\w+)", re.I)
_VNIC_IP = re.compile(r"^vnic ipaddr\s*:\s*(?P<value>\S+)", re.I)
_VNIC_MASK = re.compile(r"^vnic netmask\s*:\s*(?P<value>\S+)", re.I)
# Drivers prefix each line with `[device N]` or `[devid N]`.
_DEVICE = r"^\[(?:device|devid)\s+(?P<device>\d+)\]\s*"
_LINK_STAT = re.compile(_DEVICE + r"link up count\s*:\s*(?P<count>\d+)", re.I)
_LINK_DOWNS = re.compile(_DEVICE + r"link down count\s*:\s*(?P<count>\d+)", re.I)
_WHEN = r"(?P<when>[A-Z][a-z]{2} [A-Z][a-z]{2}\s+\d{1,2} \d{2}:\d{2}:\d{2} \d{4})"
_LINK_NOW = re.compile(_DEVICE + r"current time\s*:\s*" + _WHEN, re.I)
_LINK_CHANGE = re.compile(_DEVICE + _WHEN + r"\s+LINK (?P<state>UP|DOWN)\b", re.I)

# Which line shows which query, most specific first: "vnic link status" before "link status".
_DETECTORS: tuple[tuple[str, re.Pattern], ...] = (
    ("vnic", re.compile(r"^vnic (?:link status|ipaddr)\s*:", re.I)),
    ("link_stat", _LINK_STAT),
    ("ping", re.compile(r"^device\s+\d+\s+PING6?\s|packets? transmitted,|^recv (?:seq|time out)", re.I)),
    ("tls", _TLS),
    ("ip", re.compile(r"^(?:ipaddr|netmask)\s*:|^Get ip(?:conf)? failed", re.I)),
    ("link", _LINK),
    ("net_health", re.compile(r"^net health status\s*:|^Get device health status failed", re.I)),
    ("gateway", re.compile(r"^default gateway\s*:|^Get gateway failed", re.I)),
    ("netdetect", _NETDETECT),
    ("fec", _FEC),
    ("lldp", _LLDP),
)


class HccnError(ValueError):
    """The text holds no answer of the query asked for; the message says what was expected."""


def hccn_argv(query: str, device: int, address: str | None = None, binary: str = HCCN_TOOL) -> list[str]:
    """The argv of one query for one device (its logic id, as `-i` takes it); `ping` needs `address`."""
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise ValueError(f"device must be a non-negative int (the NPU's logic id), got {device!r}")
    if query not in QUERIES:
        raise ValueError(f"unknown hccn_tool query {query!r}; use one of: {', '.join(QUERIES)}")
    if query == "ping":
        if not address or not re.fullmatch(r"[0-9A-Fa-f:.]+", address):
            raise ValueError(f"ping needs the IP address to reach, got {address!r}")
        return [binary, "-i", str(device), "-ping", "-g", "address", address]
    return [binary, "-i", str(device), f"-{query}", "-g"]


def _lines(text: str) -> list[str]:
    # Loops paste with indentation and trailing blanks; an author's `...` (or `…`) stands for cut lines.
    return [line.strip() for line in text.expandtabs().splitlines() if line.strip() not in ("", "...", "…")]


def detect_query(text: str) -> str | None:
    """The query whose answer this text holds, from its first recognisable line; None if none is."""
    for line in _lines(text):
        for query, pattern in _DETECTORS:
            if pattern.search(line):
                return query
    return None


def _flag(value: str | None) -> bool | None:
    return None if value is None else value == "1"


def _parse_ip(lines: list[str]) -> list[dict]:
    records: list[dict] = []
    for line in lines:
        if match := _IPADDR.match(line):
            records.append({"ipaddr": match["value"], "netmask": None})
        elif match := _NETMASK.match(line):
            if records and "error" not in records[-1] and records[-1]["netmask"] is None:
                records[-1]["netmask"] = match["value"]
            else:  # the ipaddr line was cut from the capture
                records.append({"ipaddr": None, "netmask": match["value"]})
        elif _IP_ERROR.match(line):
            records.append({"ipaddr": None, "netmask": None, "error": line})
    return records


def _parse_simple(pattern: re.Pattern, key: str, error: re.Pattern | None = None) -> Callable:
    def parse(lines: list[str]) -> list[dict]:
        records = []
        for line in lines:
            if match := pattern.match(line):
                records.append({key: match["value"]})
            elif error is not None and error.match(line):
                records.append({key: None, "error": line})
        return records

    return parse


def _parse_link(lines: list[str]) -> list[dict]:
    return [{"link": match["value"].upper()} for line in lines if (match := _LINK.match(line))]


class _Ping:
    """One ping answer being read: the summary line closes it; replies count when the summary was cut."""

    def __init__(self, device: int | None = None, target: str | None = None):
        self.record: dict[str, int | float | str | None] = {
            "device": device,
            "target": target,
            "sent": None,
            "received": None,
            "loss_pct": None,
        }
        self.replies = self.lost = 0

    def close(self) -> dict:
        record = self.record
        if record["sent"] is None and self.replies + self.lost:
            sent = self.replies + self.lost
            record.update(sent=sent, received=self.replies, loss_pct=round(100.0 * self.lost / sent, 2))
        return record


def _parse_ping(lines: list[str]) -> list[dict]:
    records: list[dict] = []
    current: _Ping | None = None
    for line in lines:
        if match := _PING_HEAD.match(line):
            if current is not None:
                records.append(current.close())
            current = _Ping(int(match["device"]), match["target"])
        elif _PING_REPLY.match(line) or _PING_LOST.match(line):
            current = current or _Ping()
            if _PING_REPLY.match(line):
                current.replies += 1
            else:
                current.lost += 1
        elif match := _PING_SUMMARY.search(line):
            current = current or _Ping()
            current.record.update(
                sent=int(match["sent"]), received=int(match["received"]), loss_pct=float(match["loss"])
            )
            records.append(current.close())
            current = None
    if current is not None:
        records.append(current.close())
    return records


def _parse_tls(lines: list[str]) -> list[dict]:
    records = []
    for line in lines:
        if match := _TLS.search(line):
            preset = _TLS_PRESET.search(line)
            records.append(
                {
                    "device": int(match["device"]),
                    "tls_enabled": match["switch"] == "1",
                    "preconfigured": _flag(preset["preset"] if preset else None),
                }
            )
    return records


def _parse_gateway(lines: list[str]) -> list[dict]:
    records = []
    for line in lines:
        if match := _GATEWAY.match(line):
            records.append({"gateway": match["gateway"], "iface": match["iface"]})
        elif _GATEWAY_ERROR.match(line):
            records.append({"gateway": None, "iface": None, "error": line})
    return records


def _parse_vnic(lines: list[str]) -> list[dict]:
    records: list[dict] = []
    for line in lines:
        if match := _VNIC_LINK.match(line):
            records.append({"link": match["value"].upper(), "ipaddr": None, "netmask": None})
            continue
        for pattern, key in ((_VNIC_IP, "ipaddr"), (_VNIC_MASK, "netmask")):
            if match := pattern.match(line):
                if not records or records[-1][key] is not None:
                    records.append({"link": None, "ipaddr": None, "netmask": None})
                records[-1][key] = match["value"]
    return records


def _device_time(text: str) -> datetime | None:
    try:
        return datetime.strptime(" ".join(text.split()), "%a %b %d %H:%M:%S %Y")
    except ValueError:
        return None


def _parse_link_stat(lines: list[str]) -> list[dict]:
    """One record per device answer; its change records (newest first as printed, but read by their times)
    say how long a port that is down now has been down, which MindCluster's 30 s rule is about."""
    records: list[dict] = []
    seen: dict[int, dict] = {}  # per device: its current time, link down count and change records
    for line in lines:
        if match := _LINK_STAT.match(line):
            records.append({"device": int(match["device"]), "link_up_count": int(match["count"])})
            continue
        for pattern in (_LINK_NOW, _LINK_DOWNS, _LINK_CHANGE):
            if match := pattern.match(line):
                device = seen.setdefault(int(match["device"]), {"now": None, "downs": None, "changes": []})
                if pattern is _LINK_NOW:
                    device["now"] = _device_time(match["when"])
                elif pattern is _LINK_DOWNS:
                    device["downs"] = int(match["count"])
                elif (when := _device_time(match["when"])) is not None:
                    device["changes"].append((when, match["state"].upper()))
                break
    for record in records:
        device = seen.get(record["device"], {"now": None, "downs": None, "changes": []})
        newest = max(device["changes"], default=None)
        down_for = None
        if device["now"] is not None and newest is not None and newest[1] == "DOWN":
            down_for = max(0.0, (device["now"] - newest[0]).total_seconds())
        record |= {"link_down_count": device["downs"], "down_for_s": down_for}
    return records


PARSERS: dict[str, Callable[[list[str]], list[dict]]] = {
    "ip": _parse_ip,
    "link": _parse_link,
    "net_health": _parse_simple(_HEALTH, "health", _HEALTH_ERROR),
    "ping": _parse_ping,
    "tls": _parse_tls,
    "gateway": _parse_gateway,
    "netdetect": _parse_simple(_NETDETECT, "address"),
    "fec": _parse_simple(_FEC, "mode"),
    "lldp": _parse_simple(_LLDP, "ifname"),
    "vnic": _parse_vnic,
    "link_stat": _parse_link_stat,
}


def parse(text: str, query: str | None = None) -> list[dict]:
    """The records of `query` in this text (detected when None). Raises HccnError when there are none."""
    query = query or detect_query(text)
    if query is None:
        raise HccnError("no hccn_tool answer found in the text (expected e.g. `ipaddr:` or `link status:`)")
    if query not in PARSERS:
        raise ValueError(f"unknown hccn_tool query {query!r}; use one of: {', '.join(QUERIES)}")
    records = PARSERS[query](_lines(text))
    if not records:
        raise HccnError(f"no answer of `hccn_tool -{query} -g` found in the text")
    return records


def parse_one(text: str, query: str) -> dict:
    """The single record of one device's answer (the agent queries one device at a time)."""
    return parse(text, query)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workers.ascend.hccn", description="Read captured hccn_tool output as JSON records."
    )
    parser.add_argument("file", metavar="FILE", help="captured output, or - for stdin")
    parser.add_argument("--query", choices=QUERIES, help="the query the text answers (detected if left out)")
    args = parser.parse_args(argv)
    try:
        if args.file == "-":
            text = sys.stdin.read()
        else:
            with open(args.file, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
    except OSError as error:
        print(f"error: cannot read {args.file}: {error.strerror}", file=sys.stderr)
        return 2
    query = args.query or detect_query(text)
    try:
        records = parse(text, query)
    except HccnError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    json.dump({"query": query, "records": records}, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
