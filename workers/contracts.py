"""Messages between agents and the panel. Both sides validate with these models; nothing else crosses.

Every field is bounded: a string by its length (never longer than the panel's column for it), a number by a
range and finite, a time by the years a fleet can live in, a list by its length. A node's buggy or hostile
line is then refused alone when it is read, instead of failing later in arithmetic (a heartbeat interval of
1e14 seconds overflowed every timedelta built from it) or in the database (an over-long version string),
where it took every other node's lines of the same drain with it."""

import ipaddress
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

# Years a message's time may name: timedelta arithmetic over year 1 or 9999 overflows.
EARLIEST_YEAR, LATEST_YEAR = 2000, 2200
MAX_NAME = 63  # panel.nodes.models.Node.name
MAX_ID = 64  # operation ids (UUIDs), chip names, health words
MAX_TEXT = 4096  # an error message


def _in_our_years(moment: datetime) -> datetime:
    if not EARLIEST_YEAR <= moment.year <= LATEST_YEAR:
        raise ValueError(f"a time between the years {EARLIEST_YEAR} and {LATEST_YEAR}")
    return moment


Moment = Annotated[datetime, AfterValidator(_in_our_years)]
NodeName = Annotated[str, Field(min_length=1, max_length=MAX_NAME)]
ShortText = Annotated[str, Field(max_length=MAX_ID)]
Count = Annotated[int, Field(ge=0, le=2**53)]


# Finite floats within bounds, written out as aliases so type checkers read them as types too.
Percent = Annotated[float, Field(ge=0, le=1000, allow_inf_nan=False)]  # a little over 100 is rounding
Megabytes = Annotated[float, Field(ge=0, le=1e12, allow_inf_nan=False)]
Watts = Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)]
Celsius = Annotated[float, Field(ge=-273, le=1e4, allow_inf_nan=False)]
Load = Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)]


class Bounded(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)


EventKind = Literal["log", "progress", "state", "result"]
OperationState = Literal["running", "succeeded", "failed", "cancelled"]


def utcnow() -> datetime:
    return datetime.now(UTC)


class OperationEventMessage(Bounded):
    seq: int = Field(ge=1, le=2**53)
    time: Moment
    kind: EventKind
    payload: dict[str, Any] = Field(default_factory=dict)


class EventBatch(Bounded):
    """Numbered events of one attempt of one operation (every delivery of its task is an attempt, and each
    attempt numbers its events from 1). `final_seq` is set on the batch that ends the attempt, so the panel
    knows whether everything of it has arrived."""

    operation_id: ShortText
    node: NodeName
    attempt: int = Field(default=1, ge=1, le=2**31)
    events: list[OperationEventMessage] = Field(max_length=100_000)
    final_seq: Count | None = None


ChipNumber = Annotated[int, Field(ge=0, le=65535)]


EccCount = Annotated[int, Field(ge=0, le=4294967295)]  # npu-smi's counters stop at 2**32 - 1
# A driver event id as npu-smi prints it (`Error Code`), upper-case hex without 0x.
FaultCode = Annotated[str, Field(pattern=r"^[0-9A-F]{4,16}$")]
# How long a RoCE port has been down by the device's clock (hccn_tool -link_stat); a year at most.
DownSeconds = Annotated[float, Field(ge=0, le=366 * 86400, allow_inf_nan=False)]
MAX_FAULT_CODES = 16


class EccCounts(Bounded):
    """`npu-smi info -t ecc` of one chip (workers.ascend.npu_health.parse_ecc); None: not printed there."""

    hbm_single: EccCount | None = None
    hbm_double: EccCount | None = None
    hbm_single_total: EccCount | None = None
    hbm_double_total: EccCount | None = None
    hbm_double_isolated_pages: EccCount | None = None
    ddr_single: EccCount | None = None
    ddr_double: EccCount | None = None


class NpuHealthProbe(Bounded):
    """What the health probe read of one chip (workers.health_probe), sent every few samples, not each one:
    its error codes, ECC counters, RoCE port (None where it has none) and whether it is gone."""

    error_codes: list[FaultCode] = Field(default_factory=list, max_length=MAX_FAULT_CODES)
    ecc: EccCounts | None = None
    link: Literal["UP", "DOWN"] | None = None
    link_up_count: EccCount | None = None
    link_down_s: DownSeconds | None = None  # the port is down and has been for this long (its own records)
    gone: bool = False
    # When its commands began (Unix seconds, the node's clock): a probe read before an admin's override of the
    # chip but delivered after it speaks of what the admin forgave (panel.nodes.health.npu_health.observe).
    read_at: float | None = Field(default=None, ge=0, le=2**33)


class NpuSample(Bounded):
    npu_id: ChipNumber
    chip_id: ChipNumber
    logic_id: ChipNumber | None = None
    name: ShortText | None = None
    health: ShortText | None = None
    aicore_pct: Percent | None = None
    power_w: Watts | None = None
    temp_c: Celsius | None = None
    hbm_used_mb: Megabytes | None = None
    hbm_total_mb: Megabytes | None = None
    memory_used_mb: Megabytes | None = None
    memory_total_mb: Megabytes | None = None
    processes: list[dict[str, Any]] = Field(default_factory=list, max_length=1024)
    probe: NpuHealthProbe | None = None


class HostSample(Bounded):
    cpu_pct: Percent
    memory_used_mb: Megabytes
    memory_total_mb: Megabytes
    load1: Load


class MetricSample(Bounded):
    time: Moment
    host: HostSample
    npus: list[NpuSample] = Field(default_factory=list, max_length=256)
    error: Annotated[str, Field(max_length=MAX_TEXT)] | None = None


class MetricBatch(Bounded):
    """Samples of one node. `seq` counts batches per agent run so a receiver can see gaps; the panel keeps
    only the newest sample of a batch for live views but stores every sample in its ring buffer."""

    node: NodeName
    samples: list[MetricSample] = Field(max_length=3600)
    seq: Count = 0
    sent_at: Moment | None = None


# How often a heartbeat may claim to come: the panel waits three intervals before it calls a node offline.
HEARTBEAT_MIN_S, HEARTBEAT_MAX_S = 0.1, 3600.0


class Heartbeat(Bounded):
    node: NodeName
    time: Moment
    agent_version: Annotated[str, Field(max_length=32)]  # panel.nodes.models.Node.agent_version
    interval_s: float = Field(default=5.0, ge=HEARTBEAT_MIN_S, le=HEARTBEAT_MAX_S)
    # Operations this agent holds a lease for (running now) and ones it finished lately: the panel's reaper
    # re-sends a running operation the agent no longer knows (it was killed) and leaves the rest alone.
    running: list[ShortText] = Field(default_factory=list, max_length=4096)
    done: list[ShortText] = Field(default_factory=list, max_length=4096)


class HeartbeatLine(Bounded):
    """A heartbeat as the inbox carries it (workers.identity.HEARTBEAT_LINE_START): the agent's beats ride the
    metrics path, drained in batches, instead of a Celery task each."""

    heartbeat: Heartbeat


def _an_ip_address(value: str) -> str:
    return str(ipaddress.ip_address(value))


IpAddress = Annotated[str, Field(max_length=64), AfterValidator(_an_ip_address)]
Tally = Annotated[int, Field(ge=0, le=2**31)]
MAX_PINGS = 1024  # an NPU pings the peers' NPUs it pairs with: a few per peer node


class NpuPing(Bounded):
    node: Annotated[str, Field(max_length=MAX_NAME)] = ""
    target: IpAddress
    sent: Tally | None = None
    received: Tally | None = None
    loss_pct: Percent | None = None


class NpuNic(Bounded):
    """One NPU's NIC as hccn_tool read it (workers.steps.fabric.read_npu); a second round's has device and
    pings only."""

    device: ChipNumber
    ip: IpAddress | None = None
    netmask: ShortText | None = None
    ip_error: Annotated[str, Field(max_length=MAX_TEXT)] | None = None
    link: ShortText | None = None
    health: ShortText | None = None
    tls_enabled: bool | None = None
    tls_preconfigured: bool | None = None
    pings: list[NpuPing] = Field(default_factory=list, max_length=MAX_PINGS)


class HostPing(Bounded):
    node: Annotated[str, Field(max_length=MAX_NAME)] = ""
    address: IpAddress
    loss_pct: Percent


class HcclInterface(Bounded):
    if_ip: IpAddress | None = None
    ifname: ShortText | None = None
    exists: bool = False
    up: bool = False
    holds_ip: bool = False
    holder: ShortText | None = None
    peers: list[HostPing] = Field(default_factory=list, max_length=MAX_PINGS)


class FabricReport(Bounded):
    """An agent's NPU network report (workers.steps.fabric.probe_fabric), which the panel judges beside the
    other nodes' reports: one node's malformed report is refused alone."""

    hccn_tool: Annotated[str, Field(max_length=MAX_TEXT)] | None = None
    npus: list[NpuNic] = Field(default_factory=list, max_length=256)
    interface: HcclInterface | None = None
    pings_only: bool = False
