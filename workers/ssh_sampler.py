"""Metrics and liveness of SSH nodes (nodes without an agent), sampled by the central agent.

The panel's beat sends task agent.sample_ssh_node to queue ssh-runner once per node per metrics interval.
One sample is one `npu-smi info` and one read of /proc/loadavg, /proc/meminfo and /proc/stat over the node's
SSH connection, sent to the panel as the same MetricBatch an agent sends. The connection stays open between
samples: commands run on the process's helper loop (workers.hosts.sync_loop), where the SSH pool keeps one
connection per node.

A probe that cannot reach the host sends nothing. The panel counts every metric batch as a sign of life, so
a node whose probes fail for three intervals goes offline exactly as a silent agent does, and its first
batch after that brings it back. npu-smi failing on a reachable host is not silence: that sample carries the
error, as an agent's would.
"""

import logging
import threading
from pathlib import PurePosixPath

from workers.agent_config import AgentConfig
from workers.ascend import hccn
from workers.ascend.npu_smi import NpuSmiError
from workers.contracts import HostSample, MetricBatch, MetricSample, utcnow
from workers.health_probe import HealthProbe
from workers.hosts.sync_loop import run_coroutine_sync
from workers.identity import CENTRAL
from workers.inventory import NOT_INSTALLED
from workers.sampler import Sampler, send_metrics, timed_out

log = logging.getLogger(__name__)

HOST_FILES = ["/proc/loadavg", "/proc/meminfo", "/proc/stat"]
HOST_READ_TIMEOUT_S = 10
KB_PER_MB = 1024
# /proc/stat cpu columns: user nice system idle iowait irq softirq steal (guest time is inside user).
IDLE_COLUMNS = (3, 4)
BUSY_AND_IDLE_COLUMNS = 8


class SshProbeFailed(Exception):
    """The node could not be read over SSH: nothing is sent, and its silence counts as a missed heartbeat."""


def cpu_times(stat_line: str) -> tuple[int, int]:
    """(total, idle) jiffies from the `cpu ` line of /proc/stat."""
    columns = [int(value) for value in stat_line.split()[1 : 1 + BUSY_AND_IDLE_COLUMNS]]
    return sum(columns), sum(columns[i] for i in IDLE_COLUMNS if i < len(columns))


def parse_host_files(text: str) -> tuple[float, float, float, tuple[int, int]]:
    """(load1, memory used MB, memory total MB, cpu times) from the HOST_FILES, read with one cat."""
    lines = text.splitlines()
    memory = {}
    cpu = None
    for line in lines[1:]:
        name, _sep, rest = line.partition(":")
        if name in ("MemTotal", "MemAvailable"):
            memory[name] = int(rest.split()[0])
        elif line.startswith("cpu "):
            cpu = cpu_times(line)
    if not lines or cpu is None or "MemTotal" not in memory:
        raise SshProbeFailed(f"unexpected contents of {' '.join(HOST_FILES)}: {text[:200]!r}")
    total = memory["MemTotal"]
    available = memory.get("MemAvailable", total)
    return float(lines[0].split()[0]), (total - available) / KB_PER_MB, total / KB_PER_MB, cpu


class SshNodeProbe:
    """What the central agent keeps per SSH node between samples: its runner, the npu-smi logic ids (read
    again only when the chips change), the last CPU times (CPU % is the busy share since the last sample)
    and the batch counter."""

    def __init__(self, target: dict):
        self.target = target
        self.config = AgentConfig.for_target(target)
        self.runner = self.config.runner()
        # Probes run inside the sample over the same connection (no thread of their own); hccn_tool is the
        # host's, where its driver puts it.
        hccn_tool = str(PurePosixPath(self.config.ascend_root) / hccn.HCCN_TOOL_IN_DRIVER)
        probe = HealthProbe(self._run_npu_smi, hccn_tool=hccn_tool, background=False)
        self.sampler = Sampler(run=self._run_npu_smi, probe=probe)
        self.busy = threading.Lock()
        self.seq = 0
        self._last_cpu: tuple[int, int] | None = None

    def _run(self, argv: list[str], timeout: float):
        try:
            return run_coroutine_sync(self.runner.run(argv, timeout=timeout))
        except Exception as error:  # connection refused or lost, auth, host key: the host did not answer
            raise SshProbeFailed(f"{self.config.node_name}: {error}") from error

    def _run_npu_smi(self, argv: list[str], timeout: float) -> tuple[int, str] | None:
        result = self._run(argv, timeout)
        if result.exit_status == NOT_INSTALLED or (
            "No such file or directory" in result.stderr and not result.stdout
        ):
            return None  # a host without npu-smi sends host figures only
        if result.timed_out:
            raise timed_out(argv[0], timeout)
        return result.exit_status, result.stdout + result.stderr

    def read_host(self) -> HostSample:
        result = self._run(["cat", "--", *HOST_FILES], HOST_READ_TIMEOUT_S)
        if not result.ok:
            raise SshProbeFailed(f"{self.config.node_name}: reading {' '.join(HOST_FILES)} failed: {result}")
        load1, used_mb, total_mb, cpu = parse_host_files(result.stdout)
        # The first sample has no previous reading: it shows the average since boot.
        before = self._last_cpu or (0, 0)
        self._last_cpu = cpu
        total, idle = cpu[0] - before[0], cpu[1] - before[1]
        cpu_pct = 100.0 * (total - idle) / total if total > 0 else 0.0
        return HostSample(
            cpu_pct=round(cpu_pct, 1),
            memory_used_mb=round(used_mb, 1),
            memory_total_mb=round(total_mb, 1),
            load1=round(load1, 2),
        )

    def sample(self) -> MetricSample:
        taken = utcnow()
        try:
            npus, error = self.sampler.read_npus(), None
        except NpuSmiError as failure:
            npus, error = [], str(failure)
        return MetricSample(time=taken, host=self.read_host(), npus=npus, error=error)


_probes: dict[str, SshNodeProbe] = {}
_probes_lock = threading.Lock()


def probe_for(target: dict) -> SshNodeProbe:
    """The node's probe, made anew when its settings changed (address, credentials, environment...)."""
    with _probes_lock:
        probe = _probes.get(target["node"])
        if probe is None or probe.target != target:
            probe = _probes[target["node"]] = SshNodeProbe(target)
        return probe


def send_as_central(batch: MetricBatch) -> None:
    """An SSH node's batch is signed by the central agent, which took it."""
    send_metrics(batch, signer=CENTRAL)


def sample_and_send(target: dict, send=send_as_central) -> bool:
    """Take one sample of an SSH node and send it to the panel; False when nothing was sent."""
    probe = probe_for(target)
    if not probe.busy.acquire(blocking=False):
        return False  # the previous sample of this slow host is still running: skip, do not queue up
    try:
        sample = probe.sample()
        probe.seq += 1
        send(MetricBatch(node=probe.config.node_name, samples=[sample], seq=probe.seq, sent_at=utcnow()))
        return True
    except SshProbeFailed as failure:
        log.warning("SSH node not sampled: %s", failure)
        return False
    finally:
        probe.busy.release()
