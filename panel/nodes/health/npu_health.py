"""The NPU health policy (docs/npu-health.md): from the signals of one chip's samples, is it `ok`, `suspect`
(watched) or `failed` (out of service at once); and is a node `failed`. Pure: no database, no clock of its
own — the caller passes `now` (seconds) and keeps the chip's memory (a JSON dict) between samples.

    memory, verdict = observe(memory, npu, now)   # npu: one chip of a "metrics" message (dict)
    verdict.state, verdict.signal, verdict.detail  # the state the signals call for, and the worst one's why
    memory = overridden(memory, npu_state, now)    # an admin's override: what is present now is forgiven

States only get worse from signals: `failed` is left only by an admin (Huawei's SeparateNPU / RestartNPU
need a person or a reset), `suspect` goes back to `ok` once no signal was seen for CLEAR_AFTER_S.
"""

from dataclasses import dataclass, field

from panel.core.domain.choices import NpuHealthState
from workers.ascend.npu_fault_codes import (
    FREE_RESTART_NPU,
    NOT_HANDLE,
    RESTART_NPU,
    SEPARATE_NPU,
    describe,
)

OK, SUSPECT, FAILED = str(NpuHealthState.OK), str(NpuHealthState.SUSPECT), str(NpuHealthState.FAILED)
RANK: dict[str, int] = {OK: 0, SUSPECT: 1, FAILED: 2}

# Signals, the reason's "signal" (panel.nodes.signals.npu_health_changed).
HEALTH_WORD = "health_word"
FAULT_CODE = "fault_code"
ECC_DOUBLE = "ecc_double"
ECC_SINGLE = "ecc_single"
ECC_PAGES = "ecc_isolated_pages"
LINK_DOWN = "link_down"
LINK_FLAPS = "link_flaps"
CHIP_GONE = "chip_gone"
ADMIN = "admin"
SIGNALS = (
    HEALTH_WORD,
    FAULT_CODE,
    ECC_DOUBLE,
    ECC_SINGLE,
    ECC_PAGES,
    LINK_DOWN,
    LINK_FLAPS,
    CHIP_GONE,
    ADMIN,
)


@dataclass(frozen=True)
class Limits:
    """Thresholds per signal; docs/npu-health.md gives the source or the reason of each."""

    ecc_window_s: float = 3600.0
    ecc_double_failed: int = 2  # uncorrectable errors within the window: the HBM is going
    ecc_single_suspect: int = 1000  # correctable ones within the window: wear worth watching
    isolated_pages_failed: int = 64  # 0x80E18402: the most rows a device can isolate
    isolated_pages_suspect: int = 16  # 0x80E18401
    link_down_failed_s: float = 30.0  # MindCluster's "Link Down lasting more than 30 s" fault
    flap_window_s: float = 600.0
    flaps_suspect: int = 3
    clear_after_s: float = 600.0  # a suspect NPU with no signal for this long is ok again
    node_failed_fraction: float = 0.5  # a node with at least this share of its NPUs failed is failed


LIMITS = Limits()
WORD_STATE: dict[str, str] = {"OK": OK, "Warning": SUSPECT, "Alarm": FAILED, "Critical": FAILED}
LEVEL_STATE: dict[str, str] = {
    SEPARATE_NPU: FAILED,
    RESTART_NPU: FAILED,
    FREE_RESTART_NPU: FAILED,
    NOT_HANDLE: OK,
}


@dataclass(frozen=True)
class Finding:
    state: str  # SUSPECT or FAILED
    signal: str
    detail: str  # English, for logs and the reason; `key` is what an override forgives
    key: str


@dataclass
class Verdict:
    state: str = OK
    findings: list[Finding] = field(default_factory=list)

    @property
    def worst(self) -> Finding | None:
        return max(self.findings, key=lambda f: RANK[f.state], default=None)

    @property
    def signal(self) -> str:
        return self.worst.signal if self.worst else ""

    @property
    def detail(self) -> str:
        return "; ".join(f.detail for f in self.findings if f.state == self.state)


def _windowed(events: list, now: float, window: float) -> list:
    return [event for event in events if now - event[0] < window]


def _ecc_findings(memory: dict, ecc: dict, now: float, limits: Limits) -> list[Finding]:
    before = memory.get("ecc") or {}
    grew = {}
    for name in ("hbm_double", "ddr_double", "hbm_single", "ddr_single"):
        old, new = before.get(name), ecc.get(name)
        if old is not None and new is not None:
            grew[name] = new - old if new >= old else new
    memory["ecc"] = {name: value for name, value in ecc.items() if value is not None}
    double = grew.get("hbm_double", 0) + grew.get("ddr_double", 0)
    single = grew.get("hbm_single", 0) + grew.get("ddr_single", 0)
    memory["double"] = _windowed(memory.get("double", []), now, limits.ecc_window_s) + (
        [[now, double]] * bool(double)
    )
    memory["single"] = _windowed(memory.get("single", []), now, limits.ecc_window_s) + (
        [[now, single]] * bool(single)
    )
    found = []
    doubles = sum(count for _, count in memory["double"])
    if doubles:
        state = FAILED if doubles >= limits.ecc_double_failed else SUSPECT
        found.append(
            Finding(state, ECC_DOUBLE, f"{doubles} uncorrectable ECC errors within the hour", f"{ECC_DOUBLE}")
        )
    singles = sum(count for _, count in memory["single"])
    if singles >= limits.ecc_single_suspect:
        found.append(
            Finding(SUSPECT, ECC_SINGLE, f"{singles} corrected ECC errors within the hour", ECC_SINGLE)
        )
    pages = ecc.get("hbm_double_isolated_pages") or 0
    if pages >= limits.isolated_pages_suspect:
        state = FAILED if pages >= limits.isolated_pages_failed else SUSPECT
        found.append(Finding(state, ECC_PAGES, f"{pages} HBM pages isolated", f"{ECC_PAGES}:{state}"))
    return found


def _link_findings(memory: dict, probe: dict, now: float, limits: Limits) -> list[Finding]:
    found = []
    link, count = probe.get("link"), probe.get("link_up_count")
    if link == "DOWN":
        # Down since the panel first saw it, or since the device's own record of the change where the probe
        # read one (hccn_tool -link_stat): the 30 s rule is about how long the port is down.
        since = memory.get("link_down_since", now)
        down_s = probe.get("link_down_s")
        if isinstance(down_s, int | float) and down_s >= 0:
            since = min(since, now - down_s)
        memory["link_down_since"] = since
        state = FAILED if now - since >= limits.link_down_failed_s else SUSPECT
        found.append(Finding(state, LINK_DOWN, f"RoCE link down for {now - since:.0f} s", LINK_DOWN))
    elif link == "UP":
        memory.pop("link_down_since", None)
    before = memory.get("link_up_count")
    if count is not None:
        if before is not None:
            flaps = count - before if count >= before else count
            memory["flaps"] = _windowed(memory.get("flaps", []), now, limits.flap_window_s) + [[now]] * flaps
        memory["link_up_count"] = count
    flaps = len(_windowed(memory.get("flaps", []), now, limits.flap_window_s))
    if flaps >= limits.flaps_suspect:
        found.append(
            Finding(SUSPECT, LINK_FLAPS, f"RoCE link came up {flaps} times in 10 minutes", LINK_FLAPS)
        )
    return found


def _word_and_codes(npu: dict, probe: dict) -> list[Finding]:
    found = []
    word = npu.get("health")
    if probe.get("gone") or word == "UNKNOWN":
        return [Finding(FAILED, CHIP_GONE, "the chip stopped answering (not in npu-smi info)", CHIP_GONE)]
    word_state = WORD_STATE.get(word or "OK", SUSPECT)
    codes = probe.get("error_codes") or []
    for code in codes:
        fault = describe(code)
        state = LEVEL_STATE.get(fault.level, SUSPECT) if fault else word_state
        if state != OK:
            meaning = fault.meaning if fault else "not in the panel's table; judged by the health word"
            found.append(Finding(state, FAULT_CODE, f"error code {code}: {meaning}", f"{FAULT_CODE}:{code}"))
    known = [describe(code) for code in codes]
    if word_state != OK and not (known and all(known)):  # codes the table knows speak for themselves
        found.append(Finding(word_state, HEALTH_WORD, f"npu-smi health is {word}", f"{HEALTH_WORD}:{word}"))
    return found


def observe(memory: dict | None, npu: dict, now: float, limits: Limits = LIMITS) -> tuple[dict, Verdict]:
    """Read one sample of a chip (a "metrics" message's npu dict, with its `probe` when it has one) into its
    memory; the verdict is the state the signals present call for (the caller compares it with the chip's
    state: see `next_state`). A sample without a probe keeps the last probe's findings standing."""
    memory = dict(memory or {})
    probe = npu.get("probe") or {}
    found = _word_and_codes(npu, probe)
    if probe:
        if probe.get("ecc"):
            memory["ecc_findings"] = [f.__dict__ for f in _ecc_findings(memory, probe["ecc"], now, limits)]
        memory["link_findings"] = [f.__dict__ for f in _link_findings(memory, probe, now, limits)]
        if not probe.get("gone"):
            memory["codes"] = [f.__dict__ for f in found if f.signal == FAULT_CODE]
    elif not any(f.signal == CHIP_GONE for f in found):
        found += [Finding(**f) for f in memory.get("codes", [])]
    found += [Finding(**f) for f in memory.get("ecc_findings", []) + memory.get("link_findings", [])]
    forgiven = set(memory.get("forgiven", []))
    present = {f.key for f in found}
    if _read_before_override(probe, memory):  # what it found was there when the admin forgave the chip
        forgiven |= {key for key in present if not key.startswith(HEALTH_WORD)}
    if not probe:  # what only a probe reports was not looked at: its forgiven signals have not gone
        present |= {key for key in forgiven if not key.startswith(HEALTH_WORD)}
    memory["forgiven"] = sorted(forgiven & present)  # a forgiven signal that went is forgotten
    found = [f for f in found if f.key not in forgiven]
    if found:
        memory["last_signal_at"] = now
    state = max((f.state for f in found), key=RANK.__getitem__, default=OK)
    return memory, Verdict(state, found)


def _read_before_override(probe: dict, memory: dict) -> bool:
    """A probe whose commands began before the admin's override (a probe of a loaded node takes seconds and
    rides on the next sample): the chip it describes is the one the admin looked at. Compared by the node's
    clock against the panel's, which are in step where the fleet runs NTP; a probe without a time is new."""
    read_at, overridden_at = probe.get("read_at"), memory.get("overridden_at")
    if not isinstance(read_at, int | float) or not isinstance(overridden_at, int | float):
        return False
    return read_at < overridden_at


def next_state(current: str, verdict: Verdict, memory: dict, now: float, limits: Limits = LIMITS) -> str:
    """The chip's new state: worse when the verdict is worse; failed stays failed (only an admin lifts it);
    suspect goes back to ok after `clear_after_s` without any signal."""
    if RANK[verdict.state] > RANK[current]:
        return verdict.state
    if current == SUSPECT and verdict.state == OK:
        quiet_since = memory.get("last_signal_at")
        if quiet_since is None or now - quiet_since >= limits.clear_after_s:
            return OK
    return current


def overridden(memory: dict | None, npu: dict, now: float) -> dict:
    """An admin marked the chip healthy: the signals it shows now are forgiven until they go away, its
    windows start again; a new signal (another code, new ECC errors, a new flap) counts as usual."""
    memory = dict(memory or {})
    _, verdict = observe({**memory, "forgiven": []}, npu, now)
    memory["forgiven"] = sorted({f.key for f in verdict.findings})
    for name in ("double", "single", "flaps", "ecc_findings", "link_findings", "codes", "link_down_since"):
        memory.pop(name, None)
    memory.pop("last_signal_at", None)
    memory["overridden_at"] = now
    return memory


def node_failed(states: list[str], limits: Limits = LIMITS) -> bool:
    """A node whose share of failed NPUs reaches `node_failed_fraction` is failed (taken out as a whole); on
    a node of two or more NPUs that takes two failed ones (one failed NPU of a pair is the NPU's fault)."""
    failed = states.count(FAILED)
    return failed >= min(2, len(states)) > 0 and failed / len(states) >= limits.node_failed_fraction
