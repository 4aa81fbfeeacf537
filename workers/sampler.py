"""The metrics sampler: every NPU and the host, once per interval, sent to the panel as a MetricBatch.

One `npu-smi info` call per sample gives utilisation, HBM/memory, power, temperature, health and processes
of every chip; `npu-smi info -m` (logic ids) runs only at start and when the set of chips changes. Every
few samples the health probe (workers.health_probe) adds each chip's error codes, ECC counters and RoCE
port, and a chip that left the table is sent as gone. A host
without npu-smi sends host figures only; an npu-smi failure is sent as the sample's `error` (with its hint)
so the panel can show why the NPUs went quiet.

Every sample is sent (1 Hz by default) through the metrics inbox (workers.metrics_inbox): the panel is
the aggregator. The interval comes from ASCEND_PANEL_METRICS_S and can be changed at run time by the
panel (task agent.set_metrics_interval).
"""

import logging
import os
import subprocess
import threading
import time

import psutil

from workers import metrics_inbox
from workers.ascend.npu_smi import NpuSmiError, npu_smi_argv, parse_mapping, parse_table, raise_for_error
from workers.contracts import HostSample, MetricBatch, MetricSample, NpuSample, utcnow
from workers.health_probe import HealthProbe
from workers.i18n import gettext_noop as _

log = logging.getLogger(__name__)

NPU_SMI_TIMEOUT_S = 10
MIN_INTERVAL_S = 0.2
MB = 1024 * 1024

_interval_lock = threading.Lock()
_interval_override: float | None = None


def set_interval(seconds: float) -> float:
    """Change the sampling interval of the running sampler (the panel's per-node setting)."""
    global _interval_override
    seconds = float(seconds)
    if seconds < MIN_INTERVAL_S:
        raise ValueError(f"metrics interval must be at least {MIN_INTERVAL_S} s, got {seconds}")
    with _interval_lock:
        _interval_override = seconds
    return seconds


def current_interval(default: float) -> float:
    with _interval_lock:
        return _interval_override if _interval_override is not None else default


def send_metrics(batch: MetricBatch, signer: str | None = None) -> None:
    metrics_inbox.push(batch, signer)


def run_command(argv: list[str], timeout: float = NPU_SMI_TIMEOUT_S) -> tuple[int, str] | None:
    """(exit status, stdout + stderr) of argv, or None when the program is not installed."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        return None
    except subprocess.TimeoutExpired as error:
        raise timed_out(argv[0], timeout) from error
    return done.returncode, done.stdout + done.stderr


def timed_out(program: str, seconds: float) -> NpuSmiError:
    return NpuSmiError(
        _("{program} did not answer within {seconds} s").format(program=program, seconds=seconds),
        _("The NPU driver may be hung; check `dmesg` for davinci errors and run npu-smi info by hand."),
    )


def read_host() -> HostSample:
    memory = psutil.virtual_memory()
    try:
        load1 = os.getloadavg()[0]
    except OSError:
        load1 = 0.0
    return HostSample(
        cpu_pct=psutil.cpu_percent(interval=None),
        memory_used_mb=round((memory.total - memory.available) / MB, 1),
        memory_total_mb=round(memory.total / MB, 1),
        load1=round(load1, 2),
    )


def npu_samples(table: dict, logic_ids: dict[tuple[int, int], int | None]) -> list[NpuSample]:
    """One NpuSample per chip of a parsed `npu-smi info` table, with its processes and logic id."""
    processes: dict[tuple[int, int], list[dict]] = {}
    for process in table.get("processes") or []:
        key = (process.get("npu_id"), process.get("chip_id") or 0)
        processes.setdefault(key, []).append(
            {"pid": process.get("pid"), "name": process.get("name"), "memory_mb": process.get("memory_mb")}
        )
    samples = []
    for chip in table["chips"]:
        key = (chip["npu_id"], chip.get("chip_id") or 0)
        samples.append(
            NpuSample(
                npu_id=key[0],
                chip_id=key[1],
                logic_id=logic_ids.get(key),
                name=chip.get("name"),
                health=chip.get("health"),
                aicore_pct=chip.get("aicore_pct"),
                power_w=chip.get("power_w"),
                temp_c=chip.get("temp_c"),
                hbm_used_mb=chip.get("hbm_used_mb") if chip.get("hbm_total_mb") else None,
                hbm_total_mb=chip.get("hbm_total_mb") or None,
                memory_used_mb=chip.get("memory_used_mb") if chip.get("memory_total_mb") else None,
                memory_total_mb=chip.get("memory_total_mb") or None,
                processes=processes.get(key, []),
            )
        )
    return samples


class Sampler:
    """Takes one MetricSample at a time. `run` is how commands are run (argv, timeout) -> (status, text)."""

    def __init__(self, run=run_command, probe: HealthProbe | None = None):
        self._run = run
        self._probe = probe or HealthProbe(run)
        self._chip_set: tuple | None = None
        self._logic_ids: dict[tuple[int, int], int | None] = {}
        psutil.cpu_percent(interval=None)  # the first reading only starts psutil's CPU clock

    def sample(self) -> MetricSample:
        taken = utcnow()  # when the figures were read: what end-to-end latency is measured from
        try:
            npus, error = self.read_npus(), None
        except NpuSmiError as failure:
            npus, error = [], str(failure)
        return MetricSample(time=taken, host=read_host(), npus=npus, error=error)

    def read_npus(self) -> list[NpuSample]:
        """Chips of this host; [] when npu-smi is not installed. Raises NpuSmiError when it fails."""
        answer = self._run(npu_smi_argv("table"), NPU_SMI_TIMEOUT_S)
        if answer is None:
            return []
        _status, text = answer
        raise_for_error(text)
        table = parse_table(text)
        chip_set = tuple((chip["npu_id"], chip.get("chip_id") or 0) for chip in table["chips"])
        if chip_set != self._chip_set:
            self._logic_ids = self._read_logic_ids()
            self._chip_set = chip_set
        return self._probe.attach(npu_samples(table, self._logic_ids))

    def _read_logic_ids(self) -> dict[tuple[int, int], int | None]:
        answer = self._run(npu_smi_argv("mapping"), NPU_SMI_TIMEOUT_S)
        if answer is None:
            return {}
        try:
            raise_for_error(answer[1])
            return {(row["npu_id"], row["chip_id"]): row["logic_id"] for row in parse_mapping(answer[1])}
        except NpuSmiError as failure:  # the figures are still worth sending without logic ids
            log.warning("npu-smi info -m failed, sending samples without logic ids: %s", failure)
            return {}


def sampler_loop(config, stop: threading.Event, send=send_metrics, sampler: Sampler | None = None) -> None:
    """Sample every `config.metrics_s` seconds (or the panel's override) until `stop` is set.

    Ticks keep a fixed cadence: a slow npu-smi call delays one sample, not every later one."""
    sampler = sampler or Sampler()
    seq = 0
    next_at = time.monotonic()
    while not stop.is_set():
        seq += 1
        try:
            sample = sampler.sample()
            send(MetricBatch(node=config.node_name, samples=[sample], seq=seq, sent_at=utcnow()))
        except Exception:  # the broker may be restarting; the next tick tries again
            log.exception("metrics sample %d not sent", seq)
        interval = current_interval(config.metrics_s)
        next_at += interval
        now = time.monotonic()
        if next_at < now:  # fell behind (suspend, slow npu-smi): skip the missed ticks
            next_at = now + interval
        stop.wait(next_at - now)
