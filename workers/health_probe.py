"""The health probe: what `npu-smi info` (read every sample) does not say of a chip — its error codes, ECC
counters, RoCE port and whether it is gone — read every ASCEND_PANEL_HEALTH_PROBE_S seconds (20 by
default), at once for a chip whose health word just changed, and every WATCH_S seconds for a chip whose last
probe found something moving (a port down, new codes, ECC or link-up counters that grew). It runs in a thread
of its own, so its commands never delay the 1 Hz samples, and goes one NPU at a time, the chips asked for
first, then the watched ones, then the sweep: an NPU's findings ride on its next sample as soon as its own
commands ran, not after a sweep of the whole node (a sweep of eight NPUs took 30-50 s on a loaded machine, and
a chip whose word changed waited for it; a watched port waited behind the NPUs of lower numbers the sweep
had due: looked at every 5-12 s, 19 s when the sweep came due, with the probe at 15 % of a core; 5-7 s now).

Each chip's findings ride on the next NpuSample of that chip as `probe` (workers.contracts.NpuHealthProbe);
other samples carry none. A chip this agent saw in an earlier table and that the table no longer lists is sent
as a sample of its own with `probe.gone`, every sample, so the panel learns it at once (docs/npu-health.md).

Per probe and NPU: `npu-smi info -t ecc -i N` (on a sweep, or when the NPU's ECC counters are what moved:
a look again at a watched port reads the port alone); per chip `hccn_tool -i L -link -g` where hccn_tool
runs. Read only where they can say something new, else every SLOW_S seconds (their last answer stands in
between):
`npu-smi info -t health -i N [-c C]` (the error codes) for a chip whose health word is not OK or just changed
(npu-smi's word is the worst severity of the chip's current alarms), and `hccn_tool -i L -link_stat -g` for a
port that is down (its change records say for how long: MindCluster's 30 s rule counts the down time, not
the panel's first look at it); the down time is counted on to the sample that carries it (the probe's
findings wait for the next sample, a second or more on a loaded host). A query that fails leaves its field
empty: the probe never fails a sample.
"""

import contextlib
import logging
import math
import os
import shutil
import threading
import time
import weakref
from pathlib import PurePosixPath

from workers.ascend import hccn
from workers.ascend.npu_health import parse_ecc_chips, parse_health
from workers.ascend.npu_smi import NpuSmiError, npu_smi_argv
from workers.contracts import EccCounts, NpuHealthProbe, NpuSample

log = logging.getLogger(__name__)

DEFAULT_PROBE_S = 20.0
WATCH_S = 3.0  # a chip whose last probe found something moving is probed again this soon
SLOW_S = 60.0  # the error codes of a chip printing OK and the link_stat of a port that is up, this often
PROBE_TIMEOUT_S = 10
MAX_CHIPS_REMEMBERED = 256
MAX_DOWN_S = 366 * 86400  # workers.contracts.DownSeconds

Key = tuple[int, int]  # (NPU id, chip id)


def probe_interval() -> float:
    try:
        return max(1.0, float(os.environ.get("ASCEND_PANEL_HEALTH_PROBE_S", DEFAULT_PROBE_S)))
    except ValueError:
        return DEFAULT_PROBE_S


def find_hccn_tool() -> str | None:
    """hccn_tool on PATH, else where the driver installs it under ASCEND_PANEL_ASCEND_ROOT, else None."""
    found = shutil.which(hccn.HCCN_TOOL)
    if found:
        return found
    root = os.environ.get("ASCEND_PANEL_ASCEND_ROOT", "/usr/local/Ascend")
    candidate = str(PurePosixPath(root) / hccn.HCCN_TOOL_IN_DRIVER)
    return candidate if os.access(candidate, os.X_OK) else None


class HealthProbe:
    """Adds probes (and samples of chips that are gone) to a sample's chips. `run` is the sampler's
    (argv, timeout) -> (status, text) | None; `clock` a monotonic clock. `background=False` probes inside
    `attach` (tests, and one-off reads); otherwise a daemon thread does, started by the first `attach`."""

    def __init__(
        self,
        run,
        every_s: float | None = None,
        hccn_tool: str | None = "",
        clock=time.monotonic,
        background: bool = True,
        watch_s: float = WATCH_S,
        slow_s: float = SLOW_S,
    ):
        self._run = run
        self._every_s = probe_interval() if every_s is None else every_s
        self._watch_s = watch_s
        self._slow_s = slow_s
        self._hccn_tool = find_hccn_tool() if hccn_tool == "" else hccn_tool
        self._clock = clock
        self._background = background
        self._seen: dict[Key, NpuSample] = {}
        self._health: dict[Key, str | None] = {}
        self._lock = threading.Lock()
        self._ready: dict[Key, tuple[NpuHealthProbe, float]] = {}  # each with when its port was read
        self._asked: set[Key] = set()
        self._next: dict[Key, float] = {}  # when each chip's sweep is due (not there: at once)
        self._watch: dict[Key, float] = {}  # when a chip whose last probe found something moving is due
        self._ecc_moving: set[Key] = set()  # watched for its ECC counters: a look again reads them
        self._slow_at: dict[Key, float] = {}  # when its slow reads are due again
        self._last: dict[Key, NpuHealthProbe] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def attach(self, samples: list[NpuSample]) -> list[NpuSample]:
        """`samples` with the probes found since the last call, plus a `gone` sample per chip seen before
        and missing now."""
        present = {(s.npu_id, s.chip_id) for s in samples}
        gone = [
            old.model_copy(update={**_NO_FIGURES, "health": "UNKNOWN", "probe": NpuHealthProbe(gone=True)})
            for key, old in self._seen.items()
            if key not in present
        ]
        changed = {
            key
            for s in samples
            if (key := (s.npu_id, s.chip_id)) in self._health and self._health[key] != s.health
        }
        with self._lock:
            for sample in samples:
                key = (sample.npu_id, sample.chip_id)
                if key in self._seen or len(self._seen) < MAX_CHIPS_REMEMBERED:
                    self._seen[key] = _bare(sample)
                self._health[key] = sample.health
            self._asked |= changed
        if self._background:
            self._start()
            if changed:
                self._wake.set()
        else:
            self._probe_due()
        with self._lock:
            ready, self._ready = self._ready, {}
        now = self._clock()
        aged = {key: _aged(probe, now - read) for key, (probe, read) in ready.items()}
        probed = [s.model_copy(update={"probe": aged.get((s.npu_id, s.chip_id))}) for s in samples]
        return probed + gone

    def _start(self) -> None:
        if self._thread is None:
            # The thread holds the probe weakly: a sampler that is dropped takes its probe thread with it.
            self._thread = threading.Thread(
                target=_loop, args=(weakref.ref(self), self._wake), name="health-probe", daemon=True
            )
            self._thread.start()

    def _probe_due(self) -> None:
        """Probe every chip that is due, one NPU at a time: those whose health word changed first, then the
        watched ones (soonest due first), then the sweep; each NPU's findings are ready for the next sample
        as soon as its commands ran."""
        while True:
            chosen, asked, swept = self._next_npu()
            if not chosen:
                return
            found = self._probe(chosen, asked, swept)
            with self._lock:
                self._ready.update(found)
                now = self._clock()
                for key, (probe, _read) in found.items():
                    last = self._last.get(key)
                    if key in swept:
                        self._next[key] = now + self._every_s
                    if _worth_watching(probe, last):
                        self._watch[key] = now + self._watch_s
                    else:
                        self._watch.pop(key, None)
                    if last is not None and _doubles(probe.ecc) != _doubles(last.ecc):
                        self._ecc_moving.add(key)
                    else:
                        self._ecc_moving.discard(key)
                    self._last[key] = probe

    def _next_npu(self) -> tuple[list[NpuSample], set[Key], set[Key]]:
        """The due chips of one NPU (the first asked for, else the watched chip due first, else the sweep's
        first), which of them were asked for, and which get the sweep's reads (asked, or their sweep due)."""
        with self._lock:
            now = self._clock()
            asked = sorted(key for key in self._asked if key in self._seen)
            watched = sorted((at, key) for key, at in self._watch.items() if key in self._seen and at <= now)
            swept = {key for key in self._seen if self._next.get(key, -math.inf) <= now}
            if asked:
                npu_id = asked[0][0]
            elif watched:
                npu_id = watched[0][1][0]
            elif swept:
                npu_id = min(swept, key=lambda key: (self._next.get(key, -math.inf), key))[0]
            else:
                return [], set(), set()
            due = swept | {key for _at, key in watched}
            keys = [key for key in self._seen if key[0] == npu_id and (key in self._asked or key in due)]
            taken = self._asked & set(keys)
            self._asked -= taken
            return [self._seen[key] for key in sorted(keys)], taken, (swept & set(keys)) | taken

    def next_due_in(self) -> float:
        """Seconds until a chip is due (0: now)."""
        with self._lock:
            if self._asked:
                return 0.0
            dues = [self._next.get(key, -math.inf) for key in self._seen]
            dues += [at for key, at in self._watch.items() if key in self._seen]
            return max(0.0, min(dues, default=math.inf) - self._clock())

    def _probe(
        self, samples: list[NpuSample], asked: set[Key], swept: set[Key]
    ) -> dict[Key, tuple[NpuHealthProbe, float]]:
        """One NPU's chips: its ECC counters (on a sweep, or when they are what moved; else the last ones
        stand), and each chip's codes and port (the slow reads where due); each with when its port was
        read, so its down time can be counted on to the sample that carries it."""
        npu_id = samples[0].npu_id
        read_at = time.time()
        keys = [(sample.npu_id, sample.chip_id) for sample in samples]
        ecc: dict[int | None, EccCounts | None]
        if any(key in swept or key in self._ecc_moving or key not in self._last for key in keys):
            ecc = dict(self._ecc(npu_id))
        else:  # a look again at a watched port: ECC counters lose nothing by being read at the sweep
            ecc = {key[1]: self._last[key].ecc for key in keys}
        probes = {}
        for sample in samples:
            key = (sample.npu_id, sample.chip_id)
            last = self._last.get(key)
            slow = self._clock() >= self._slow_at.get(key, -math.inf)
            multi_chip = len(self._chips_of(npu_id)) > 1 or sample.chip_id != 0
            word_says_something = sample.health not in ("OK", None) or key in asked
            if slow or word_says_something or last is None:
                codes = self._codes(npu_id, sample.chip_id if multi_chip else None)
            else:
                codes = list(last.error_codes)  # a chip printing OK has no alarm: its codes stand
            link = self._link(sample.logic_id, slow, last)
            if slow:
                self._slow_at[key] = self._clock() + self._slow_s
            probe = NpuHealthProbe(
                error_codes=codes, ecc=ecc.get(sample.chip_id, ecc.get(None)), read_at=read_at, **link
            )
            probes[key] = (probe, self._clock())
        return probes

    def _chips_of(self, npu_id: int) -> list[Key]:
        with self._lock:
            return [key for key in self._seen if key[0] == npu_id]

    def _text(self, argv: list[str]) -> str | None:
        try:
            answer = self._run(argv, PROBE_TIMEOUT_S)
        except NpuSmiError as error:  # timed out: the next probe tries again
            log.warning("health probe %s: %s", " ".join(argv), error)
            return None
        return None if answer is None else answer[1]

    def _codes(self, npu_id: int, chip_id: int | None) -> list[str]:
        text = self._text(npu_smi_argv("health", npu_id, chip_id))
        if text is None:
            return []
        try:
            return parse_health(text)["error_codes"][:16]
        except NpuSmiError:
            return []

    def _ecc(self, npu_id: int) -> dict[int | None, EccCounts]:
        text = self._text(npu_smi_argv("ecc", npu_id))
        if text is None:
            return {}
        try:
            return {chip: EccCounts(**counts) for chip, counts in parse_ecc_chips(text).items()}
        except (NpuSmiError, ValueError):
            return {}

    def _link(self, logic_id: int | None, slow: bool, last: NpuHealthProbe | None) -> dict:
        """The port's state; its link-up count (flaps) and down time from -link_stat when the port is down,
        changed state or the slow read is due, else the last count stands (a counter loses no flap by being
        read late)."""
        if self._hccn_tool is None or logic_id is None:
            return {}
        found: dict = {}
        with contextlib.suppress(hccn.HccnError):
            found["link"] = hccn.parse_one(self._hccn_text("link", logic_id) or "", "link")["link"]
        changed = last is None or last.link != found.get("link")  # came back up: its count grew
        if not (slow or changed or found.get("link") == "DOWN"):
            if last is not None and last.link_up_count is not None:
                found["link_up_count"] = last.link_up_count
            return found
        try:
            stat = hccn.parse_one(self._hccn_text("link_stat", logic_id) or "", "link_stat")
        except hccn.HccnError:
            return found
        found["link_up_count"] = stat["link_up_count"]
        if found.get("link") == "DOWN" and stat["down_for_s"] is not None:
            found["link_down_s"] = min(stat["down_for_s"], MAX_DOWN_S)
        return found

    def _hccn_text(self, query: str, logic_id: int) -> str | None:
        return self._text(hccn.hccn_argv(query, logic_id, binary=self._hccn_tool or hccn.HCCN_TOOL))


def _aged(probe: NpuHealthProbe, seconds: float) -> NpuHealthProbe:
    """The probe as of the sample that carries it: a port that was down is down that much longer."""
    if probe.link_down_s is None or seconds <= 0:
        return probe
    return probe.model_copy(update={"link_down_s": min(probe.link_down_s + seconds, MAX_DOWN_S)})


def _worth_watching(probe: NpuHealthProbe, last: NpuHealthProbe | None) -> bool:
    """Whether a chip is probed again in WATCH_S: its port is down (the panel's 30 s rule wants to see it
    still down), or something moved since its last probe (new codes, ECC errors, a flap)."""
    if probe.gone:
        return False
    if probe.link == "DOWN":
        return True
    if last is None:
        return bool(probe.error_codes)
    return (
        probe.error_codes != last.error_codes
        or _doubles(probe.ecc) != _doubles(last.ecc)
        or probe.link_up_count != last.link_up_count
    )


def _doubles(ecc: EccCounts | None) -> tuple:
    if ecc is None:
        return ()
    return (ecc.hbm_double, ecc.ddr_double, ecc.hbm_double_isolated_pages)


# A chip that is gone reads nothing: its last figures are not sent again as if they were current.
_NO_FIGURES = dict.fromkeys(("aicore_pct", "power_w", "temp_c", "hbm_used_mb", "memory_used_mb"))


def _loop(probe_ref, wake: threading.Event) -> None:
    while (probe := probe_ref()) is not None:
        try:
            probe._probe_due()
        except Exception:  # a probe that fails is tried again at the next one
            log.exception("health probe failed")
        wait = min(max(0.5, probe.next_due_in()), probe._every_s)
        del probe
        wake.wait(wait)
        wake.clear()


def _bare(sample: NpuSample) -> NpuSample:
    return sample.model_copy(update={"processes": [], "probe": None})
