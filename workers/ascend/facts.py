"""Facts about a host that the panel needs to plan deployments: OS, CPU, NUMA, memory, disks, Pythons.

The parsers are pure functions of command output or file text. `collect_host_facts` reads the host through
a Runner: files under host_root with `runner.read_text`, commands with `runner.run`. host_root lets a
simulated host (a directory tree) answer exactly as a real one does; this code does not know which it is.
"""

import asyncio
import re
import shlex

# Commands run with the C locale: lscpu and df translate their labels (e.g. zh_CN on Kylin).
C_LOCALE = ("env", "LC_ALL=C")
PYTHON_COMMANDS = ("python3", "python3.9", "python3.10", "python3.11", "python3.12", "python3.13")
PYTHON_PROBE = "import sys; print(sys.executable); print('.'.join(map(str, sys.version_info[:3])))"
DEFAULT_DISK_PATHS = ("/", "/home", "/data", "/usr/local/Ascend")

# ARM CPUs name themselves in /proc/cpuinfo only by implementer and part numbers.
ARM_IMPLEMENTERS = {"0x41": "ARM", "0x48": "HiSilicon", "0x70": "Phytium"}
ARM_PARTS = {("0x48", "0xd01"): "Kunpeng-920"}


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value.strip()) if value is not None else None
    except ValueError:
        return None


def _unquote(value: str) -> str:
    try:
        return " ".join(shlex.split(value))
    except ValueError:  # an unbalanced quote: keep the text as written
        return value.strip().strip("\"'")


def parse_os_release(text: str) -> dict:
    """/etc/os-release -> {"id", "name", "version", "version_id", "pretty_name"} (None where absent)."""
    values = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            values[key] = _unquote(value)
    return {
        "id": values.get("ID"),
        "name": values.get("NAME"),
        "version": values.get("VERSION"),
        "version_id": values.get("VERSION_ID"),
        "pretty_name": values.get("PRETTY_NAME"),
    }


def parse_uname(text: str) -> dict:
    """`uname -r -m` -> {"kernel", "arch"}; uname prints the release before the machine."""
    words = text.split()
    if len(words) < 2:
        return {"kernel": words[0] if words else None, "arch": None}
    return {"kernel": " ".join(words[:-1]), "arch": words[-1]}


def _colon_fields(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def parse_lscpu(text: str) -> dict:
    """`lscpu` (C locale) -> architecture, model, vendor, topology and the CPU list of each NUMA node.

    Newer lscpu on ARM prints `Socket(s): -` with `Cluster(s)` and `Core(s) per cluster` when it cannot
    read the firmware tables, so clusters stand in for sockets there.
    """
    fields = _colon_fields(text)
    model = fields.get("Model name")
    sockets = _int_or_none(fields.get("Socket(s)")) or _int_or_none(fields.get("Cluster(s)"))
    cores_per_socket = _int_or_none(fields.get("Core(s) per socket")) or _int_or_none(
        fields.get("Core(s) per cluster")
    )
    numa_cpus = {}
    for key, value in fields.items():
        match = re.fullmatch(r"NUMA node(\d+) CPU\(s\)", key)
        if match:
            numa_cpus[int(match.group(1))] = value
    return {
        "architecture": fields.get("Architecture"),
        "model_name": model if model and model != "-" else None,
        "vendor": fields.get("Vendor ID"),
        "cpus": _int_or_none(fields.get("CPU(s)")),
        "sockets": sockets,
        "cores_per_socket": cores_per_socket,
        "threads_per_core": _int_or_none(fields.get("Thread(s) per core")),
        "numa_nodes": _int_or_none(fields.get("NUMA node(s)")),
        "numa_cpus": dict(sorted(numa_cpus.items())),
    }


def parse_cpuinfo(text: str) -> dict:
    """/proc/cpuinfo -> {"model_name", "vendor", "processors"}; ARM models come from implementer/part."""
    processors = 0
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key == "processor":
            processors += 1
        fields.setdefault(key, value.strip())
    model = fields.get("model name")
    vendor = fields.get("vendor_id")
    implementer = fields.get("CPU implementer", "").lower()
    if implementer:
        part = fields.get("CPU part", "").lower()
        vendor = ARM_IMPLEMENTERS.get(implementer, f"implementer {implementer}")
        model = model or ARM_PARTS.get((implementer, part), f"{vendor} part {part}")
    return {"model_name": model, "vendor": vendor, "processors": processors or None}


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo or a NUMA node's meminfo -> {key: value}; `kB` values become bytes."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        match = re.match(r"\s*(?:Node \d+ )?([\w()]+):\s+(\d+)(?:\s*(kB))?", line)
        if match:
            key, number, unit = match.groups()
            values[key] = int(number) * 1024 if unit else int(number)
    return values


def parse_numa_cpulist(text: str) -> list[int]:
    """A kernel CPU/node list such as `0-23,48-71` -> [0, 1, ..., 23, 48, ..., 71]."""
    numbers: list[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        first, _, last = part.partition("-")
        numbers.extend(range(int(first), int(last or first) + 1))
    return numbers


def parse_df(text: str) -> list[dict]:
    """`df -P -B1` -> one row per file system; -P keeps each on one line, B1 gives bytes."""
    disks = []
    for line in text.splitlines()[1:]:
        fields = line.split(None, 5)
        if len(fields) < 6 or not fields[1].isdigit():
            continue
        disks.append(
            {
                "filesystem": fields[0],
                "mount": fields[5],
                "size_bytes": int(fields[1]),
                "used_bytes": int(fields[2]),
                "available_bytes": int(fields[3]),
            }
        )
    return disks


def parse_hugepage_dirs(text: str) -> list[int]:
    """Names under /sys/kernel/mm/hugepages (`hugepages-2048kB`) -> page sizes in kB, smallest first."""
    return sorted(int(size) for size in re.findall(r"hugepages-(\d+)kB", text))


def parse_python_probe(text: str) -> dict | None:
    lines = text.strip().splitlines()
    if len(lines) != 2:
        return None
    return {"path": lines[0].strip(), "version": lines[1].strip()}


def sysfs_bus_id(bus_id: str) -> str | None:
    """npu-smi prints `0000:C1:00.0`; sysfs names the device in lower case. `NA` (SoC boards) has none."""
    bus = bus_id.strip().lower()
    return bus if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", bus) else None


# --- collecting through a Runner ---------------------------------------------------------------------


class _Host:
    """Paths under host_root and C-locale commands, shared by the collectors below."""

    def __init__(self, runner, host_root: str):
        self.runner = runner
        self.root = host_root.rstrip("/")

    def path(self, absolute: str) -> str:
        return f"{self.root}{absolute}"

    async def read(self, absolute: str) -> str | None:
        return await self.runner.read_text(self.path(absolute))

    async def output(self, *argv: str, accept_failure: bool = False) -> str | None:
        result = await self.runner.run([*C_LOCALE, *argv])
        if result.exit_status == 0 or (accept_failure and result.stdout):
            return result.stdout
        return None


async def _os_facts(host: _Host) -> dict | None:
    text = await host.read("/etc/os-release")
    if text is None:
        text = await host.read("/usr/lib/os-release")
    return parse_os_release(text) if text is not None else None


async def _cpu_facts(host: _Host) -> tuple[dict, dict]:
    lscpu_text = await host.output("lscpu")
    lscpu = parse_lscpu(lscpu_text) if lscpu_text else parse_lscpu("")
    cpuinfo_text = await host.read("/proc/cpuinfo") if not lscpu["model_name"] else None
    cpuinfo = parse_cpuinfo(cpuinfo_text) if cpuinfo_text else {}
    sockets, per_socket = lscpu["sockets"], lscpu["cores_per_socket"]
    cpu = {
        "model": lscpu["model_name"] or cpuinfo.get("model_name"),
        "vendor": lscpu["vendor"] or cpuinfo.get("vendor"),
        "sockets": sockets,
        "cores": sockets * per_socket if sockets and per_socket else None,
        "threads_per_core": lscpu["threads_per_core"],
        "logical_cpus": lscpu["cpus"] or cpuinfo.get("processors"),
    }
    return cpu, lscpu


async def _numa_node(host: _Host, node: int, lscpu_cpus: dict[int, str]) -> dict:
    folder = f"/sys/devices/system/node/node{node}"
    cpulist = await host.read(f"{folder}/cpulist")
    cpulist = cpulist.strip() if cpulist is not None else lscpu_cpus.get(node)
    meminfo_text = await host.read(f"{folder}/meminfo")
    meminfo = parse_meminfo(meminfo_text) if meminfo_text else {}
    return {
        "node": node,
        "cpulist": cpulist,
        "cpus": len(parse_numa_cpulist(cpulist)) if cpulist else None,
        "memory_total_bytes": meminfo.get("MemTotal"),
        "memory_free_bytes": meminfo.get("MemFree"),
    }


async def _numa_facts(host: _Host, lscpu: dict) -> list[dict]:
    online = await host.read("/sys/devices/system/node/online")
    nodes = parse_numa_cpulist(online) if online else sorted(lscpu["numa_cpus"])
    return list(await asyncio.gather(*(_numa_node(host, node, lscpu["numa_cpus"]) for node in nodes)))


async def _memory_facts(host: _Host) -> dict | None:
    text = await host.read("/proc/meminfo")
    if text is None:
        return None
    meminfo = parse_meminfo(text)
    return {
        "total_bytes": meminfo.get("MemTotal"),
        "available_bytes": meminfo.get("MemAvailable"),
        "free_bytes": meminfo.get("MemFree"),
    }


async def _hugepage_size(host: _Host, size_kb: int) -> dict:
    folder = f"/sys/kernel/mm/hugepages/hugepages-{size_kb}kB"
    total, free = await asyncio.gather(
        host.read(f"{folder}/nr_hugepages"), host.read(f"{folder}/free_hugepages")
    )
    return {"size_kb": size_kb, "total": _int_or_none(total), "free": _int_or_none(free)}


async def _hugepage_facts(host: _Host) -> list[dict]:
    listing = await host.output("ls", "-1", host.path("/sys/kernel/mm/hugepages"))
    sizes = parse_hugepage_dirs(listing or "")
    return list(await asyncio.gather(*(_hugepage_size(host, size) for size in sizes)))


async def _disk_facts(host: _Host, disk_paths: tuple[str, ...]) -> list[dict]:
    # df exits 1 when one path is missing but still reports the others.
    text = await host.output("df", "-P", "-B1", *(host.path(p) for p in disk_paths), accept_failure=True)
    unique = {disk["mount"]: disk for disk in parse_df(text or "")}
    return list(unique.values())


async def _python_facts(host: _Host) -> list[dict]:
    async def probe(command: str) -> dict | None:
        # `env` turns a missing interpreter into exit status 127 instead of a spawn error.
        result = await host.runner.run(["env", command, "-c", PYTHON_PROBE])
        found = parse_python_probe(result.stdout) if result.exit_status == 0 else None
        return {"command": command, **found} if found else None

    return [found for found in await asyncio.gather(*(probe(c) for c in PYTHON_COMMANDS)) if found]


async def collect_host_facts(
    runner, host_root: str = "/", disk_paths: tuple[str, ...] = DEFAULT_DISK_PATHS
) -> dict:
    """Everything the panel shows about a host and plans with, read through `runner`."""
    host = _Host(runner, host_root)
    # Two groups, all at once: gather's types reach six awaitables.
    (os_release, uname_text, (cpu, lscpu)), (memory, hugepages, disks, pythons) = await asyncio.gather(
        asyncio.gather(_os_facts(host), host.output("uname", "-r", "-m"), _cpu_facts(host)),
        asyncio.gather(
            _memory_facts(host), _hugepage_facts(host), _disk_facts(host, disk_paths), _python_facts(host)
        ),
    )
    uname = parse_uname(uname_text or "")
    return {
        "os": os_release,
        "kernel": uname["kernel"],
        "arch": uname["arch"] or lscpu["architecture"],
        "cpu": cpu,
        "numa_nodes": await _numa_facts(host, lscpu),
        "memory": memory,
        "hugepages": hugepages,
        "disks": disks,
        "pythons": pythons,
    }


async def npu_numa_nodes(runner, bus_ids, host_root: str = "/") -> dict[str, int | None]:
    """The NUMA node of each NPU's PCI device (None when unknown: `-1`, `NA` bus id, or no sysfs entry)."""
    host = _Host(runner, host_root)

    async def node_of(bus_id: str) -> int | None:
        bus = sysfs_bus_id(bus_id)
        if bus is None:
            return None
        node = _int_or_none(await host.read(f"/sys/bus/pci/devices/{bus}/numa_node"))
        return node if node is not None and node >= 0 else None

    bus_ids = list(bus_ids)
    nodes = await asyncio.gather(*(node_of(bus_id) for bus_id in bus_ids))
    return dict(zip(bus_ids, nodes, strict=True))
