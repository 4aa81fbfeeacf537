"""Files of a sim host under its root: bin/ tools, etc/, proc/, sys/ and the /usr/local/Ascend tree.

Everything is written as the real host would show it relative to `/`, so code that reads
ROOT/usr/local/Ascend/driver/version.info or ROOT/sys/bus/pci/devices/<id>/numa_node works the same on
a sim root and on a real machine with ROOT=/. The set_env.sh scripts name ROOT's absolute paths, as the
packages write them when installed with --install-path=ROOT/usr/local/Ascend, so sourcing them on the sim
puts the toolkit's bin/ (where the sim's atc lives) on PATH, as on a real host.

The CANN toolkit carries the operator (kernels) package of the profile's chip only; msModelSlim is there
when asked for (`create --with-msmodelslim`), as on real hosts, where it is a separate install.
"""

import contextlib
import hashlib
import os
import shlex
import shutil
import stat
import sys
from pathlib import Path

from workers.sim import state as sim_state
from workers.sim.profiles import FAMILY_310P, FAMILY_910_93, FAMILY_910B, OS_RELEASES, Profile, get_profile
from workers.sim.tools import CPU_FLAGS
from workers.sim.venv import write_sim_venv

ASCEND = Path("usr/local/Ascend")
ARCH = "aarch64"
HUGEPAGE_SIZES_KB = (64, 2048, 32768, 1048576)  # Kunpeng with 4K base pages
TOOLS = ("npu-smi", "lscpu", "numactl", "uname", "ip", "ping")
# hccn_tool is where the driver installs it and, as on real hosts, not on PATH.
HCCN_TOOL = ASCEND / "driver/tools/hccn_tool"
GENERATED_DIRS = ("bin", "etc", "proc", "sys", ASCEND)
REPO_ROOT = Path(__file__).resolve().parents[2]
KERNELS_CHIP = {FAMILY_910B: "910b", FAMILY_310P: "310p", FAMILY_910_93: "a3"}  # as in the package names
KERNEL_DIR = Path("opp/built-in/op_impl/ai_core/tbe/kernel")

TOOL_SCRIPT = """#!{python}
# Written by `python -m workers.sim create`; the logic lives in {module}.
import sys
from pathlib import Path

sys.path.insert(0, {repo!r})
from {module} import main

sys.exit(main({tool_arg}sys.argv[1:], str(Path(__file__).resolve().parents[{depth}])))
"""
# Tools whose logic is a module of its own, which their script imports alone: every npu-smi, hccn_tool or
# ping of an agent is a Python start-up, and workers.sim.tools importing msmodelslim (through the model
# folder, numpy) made each cost 0.2 s of CPU instead of 0.07 s.
OWN_MODULE_TOOLS = {"atc": "workers.sim.atc", "msmodelslim": "workers.sim.msmodelslim"}


def tool_script(tool: str, depth: int = 1) -> str:
    """The executable for DIR/bin/<tool>; it calls workers.sim.tools.main (or the tool's own module's main)
    with DIR, which is `depth` folders above the script's own (1 for bin/)."""
    module = OWN_MODULE_TOOLS.get(tool)
    return TOOL_SCRIPT.format(
        python=sys.executable,
        repo=str(REPO_ROOT),
        module=module or "workers.sim.tools",
        tool_arg="" if module else f"{tool!r}, ",
        depth=depth,
    )


def write(root: Path, relative: str | Path, text: str, mode: int = 0o644) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    temporary.chmod(mode)
    os.replace(temporary, path)


def create_host(
    root: Path,
    profile_name: str,
    node_name: str | None = None,
    reset: bool = False,
    msmodelslim: bool = False,
) -> dict:
    """Write (or refresh) a sim root. Faults, holders, msModelSlim stay unless `reset`; returns the state."""
    profile = get_profile(profile_name)
    root.mkdir(parents=True, exist_ok=True)
    if reset:
        # A reset host is a fresh one: nothing of an earlier profile (PCI devices, NUMA nodes) survives.
        for generated in GENERATED_DIRS:
            shutil.rmtree(root / generated, ignore_errors=True)
    existing = None if reset or not sim_state.state_path(root).exists() else sim_state.load(root)
    if existing is not None and existing["profile"] != profile.name:
        raise sim_state.SimStateError(
            f"{root} already simulates {existing['profile']}; pass --reset to turn it into {profile.name}"
        )
    name = node_name or (existing or {}).get("node_name") or profile.default_node_name
    build_tree(root, profile, name)
    if msmodelslim:
        install_msmodelslim(root)
    if existing is None:
        sim_state.save(root, sim_state.new_state(profile.name, name))
    else:
        with sim_state.locked(root) as current:
            current["node_name"] = name
    return sim_state.load(root)


def build_tree(root: Path, profile: Profile, node_name: str) -> None:
    write_tools(root)
    write_etc(root, profile, node_name)
    write_proc(root, profile)
    write_sys(root, profile)
    write_ascend(root, profile)
    write_sim_venv(root)
    write_devices(root, profile)


def write_tools(root: Path) -> None:
    for tool in TOOLS:
        write(root, f"bin/{tool}", tool_script(tool), mode=0o755)
    write(root, HCCN_TOOL, tool_script("hccn_tool", depth=len(HCCN_TOOL.parts) - 1), mode=0o755)
    # Tools that look for npu-smi where the driver installs it find it there too.
    link = root / ASCEND / "driver/tools/npu-smi"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(root.resolve() / "bin/npu-smi")


def write_devices(root: Path, profile: Profile) -> None:
    """What an engine container is handed from the host: /dev/davinci<phy id> and the control devices as
    character devices (copies of /dev/null, so nothing reaches hardware), and the driver's paths that
    vllm-ascend's `docker run` mounts. Making device nodes needs root; elsewhere they are left out and
    container launches on this sim host fail at `run`, as on a host whose driver is missing."""
    names = [f"davinci{chip.phy_id}" for chip in profile.chips]
    names += ["davinci_manager", "devmm_svm", "hisi_hdc"]
    for name in names:
        node = root / "dev" / name
        node.parent.mkdir(parents=True, exist_ok=True)
        if not node.exists():
            with contextlib.suppress(PermissionError):
                os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    (root / "usr/local/dcmi").mkdir(parents=True, exist_ok=True)
    (root / ASCEND / "driver/lib64").mkdir(parents=True, exist_ok=True)
    link = root / "usr/local/bin/npu-smi"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(root.resolve() / "bin/npu-smi")


def install_msmodelslim(root: Path) -> None:
    """msModelSlim's console script, where a pip install into the host's Python puts it on PATH."""
    write(root, "bin/msmodelslim", tool_script("msmodelslim"), mode=0o755)


def write_etc(root: Path, profile: Profile, node_name: str) -> None:
    release = OS_RELEASES[profile.os_id]
    write(root, "etc/os-release", "".join(f'{key}="{value}"\n' for key, value in release.items()))
    write(root, "etc/hostname", node_name + "\n")
    # npu-smi warns that the driver is incomplete unless this says so.
    write(
        root,
        "etc/ascend_install.info",
        "UserName=HwHiAiUser\nUserGroup=HwHiAiUser\n"
        "Firmware_Install_Type=full\nFirmware_Install_Path_Param=/usr/local/Ascend\n"
        "Driver_Install_Type=full\nDriver_Install_Path_Param=/usr/local/Ascend\n"
        "Driver_Install_For_All=no\nDriver_Install_Mode=normal\nDriver_Install_Status=complete\n",
    )


def write_proc(root: Path, profile: Profile) -> None:
    blocks = [
        f"processor\t: {cpu}\nBogoMIPS\t: 200.00\nFeatures\t: {CPU_FLAGS}\n"
        "CPU implementer\t: 0x48\nCPU architecture: 8\nCPU variant\t: 0x1\n"
        "CPU part\t: 0xd01\nCPU revision\t: 0\n"
        for cpu in range(profile.cpu_count)
    ]
    write(root, "proc/cpuinfo", "\n".join(blocks) + "\n")

    total_kb = profile.memory_mb * 1024
    free_kb = total_kb * 91 // 100
    meminfo = [
        ("MemTotal", total_kb),
        ("MemFree", free_kb),
        ("MemAvailable", total_kb * 94 // 100),
        ("Buffers", 1_048_576),
        ("Cached", total_kb * 2 // 100),
        ("SwapTotal", 0),
        ("SwapFree", 0),
        ("HugePages_Total", 0),
        ("HugePages_Free", 0),
        ("HugePages_Rsvd", 0),
        ("HugePages_Surp", 0),
        ("Hugepagesize", 2048),
    ]
    lines = []
    for key, value in meminfo:
        unit = "" if key.startswith("HugePages_") else " kB"
        lines.append(f"{key + ':':<16}{value:>8}{unit}")
    write(root, "proc/meminfo", "\n".join(lines) + "\n")
    version = f"Linux version {profile.kernel} (root@localhost) (gcc version 10.3.1) #1 SMP\n"
    write(root, "proc/version", version)


def write_sys(root: Path, profile: Profile) -> None:
    nodes = profile.numa_nodes
    node_dir = Path("sys/devices/system/node")
    node_range = f"0-{len(nodes) - 1}\n"
    for name in ("online", "possible", "has_cpu", "has_memory", "has_normal_memory"):
        write(root, node_dir / name, node_range)
    for node in nodes:
        total_kb = node.memory_mb * 1024
        free_kb = total_kb * 91 // 100
        write(root, node_dir / f"node{node.node_id}/cpulist", node.cpulist + "\n")
        meminfo = [("MemTotal", total_kb), ("MemFree", free_kb), ("MemUsed", total_kb - free_kb)]
        write(
            root,
            node_dir / f"node{node.node_id}/meminfo",
            "".join(f"Node {node.node_id} {key + ':':<15} {value:>8} kB\n" for key, value in meminfo),
        )
    write(root, "sys/devices/system/cpu/online", f"0-{profile.cpu_count - 1}\n")
    write(root, "sys/devices/system/cpu/possible", f"0-{profile.cpu_count - 1}\n")

    for chip in profile.chips:
        device = Path("sys/bus/pci/devices") / chip.sysfs_bus_id
        write(root, device / "numa_node", f"{chip.numa_node}\n")
        write(root, device / "vendor", "0x19e5\n")
        write(root, device / "device", profile.pci_device_id.lower() + "\n")
        write(root, device / "class", "0x120000\n")  # processing accelerator

    for size_kb in HUGEPAGE_SIZES_KB:
        pages = Path(f"sys/kernel/mm/hugepages/hugepages-{size_kb}kB")
        for name in ("nr_hugepages", "free_hugepages", "resv_hugepages", "surplus_hugepages"):
            write(root, pages / name, "0\n")


def _inner_version(seed: str) -> str:
    digest = int(hashlib.sha256(seed.encode()).hexdigest()[:6], 16)
    return f"V100R001C{19 + digest % 5}SPC00{digest % 3 + 1}B{200 + digest % 40}"


def write_ascend(root: Path, profile: Profile) -> None:
    driver, firmware, cann = profile.driver_version, profile.firmware_version, profile.cann_version
    write(
        root,
        ASCEND / "driver/version.info",
        f"Version={driver}\nascendhal_version=7.35.19\naicpu_version=1.0\ntdt_version=1.0\nlog_version=1.0\n"
        f"prof_version=2.0\ndvppkernels_version=1.1\ntsfw_version=1.0\nInnerversion={_inner_version(driver)}\n"
        f"compatible_version=[V100R001C15],[V100R001C17],[V100R001C18],[V100R001C19]\n"
        f"compatible_version_fw=[7.0.0,7.9.99]\npackage_version={driver}\n",
    )
    write(
        root,
        ASCEND / "firmware/version.info",
        f"Version={firmware}\nfirmware_version=1.0\npackage_version={driver}\n"
        f"compatible_version_drv=[23.0.rc3,23.0.rc3.],[24.1,24.1.],[25.2,25.2.]\n",
    )

    toolkit = ASCEND / "ascend-toolkit" / cann
    toolkit_inner = _inner_version(cann)
    write(
        root,
        toolkit / f"{ARCH}-linux/ascend_toolkit_install.info",
        f"package_name=Ascend-cann-toolkit\nversion={cann}\ninnerversion={toolkit_inner}\n"
        f"compatible_version=[V100R001C15],[V100R001C18],[V100R001C19],[V100R001C20],[V100R001C21]\n"
        f"arch={ARCH}\nos=linux\npath=/usr/local/Ascend/ascend-toolkit/{cann}/{ARCH}-linux\n",
    )
    running = f"[{profile.firmware_version}:{cann}]"
    components = ("runtime", "compiler", "opp", "toolkit", "aoe", "ncs", "hccl", "opp_kernel")
    write(
        root,
        toolkit / "version.cfg",
        "# version: 1.0\n" + "".join(f"{name}_running_version={running}\n" for name in components),
    )
    write(root, toolkit / "runtime/version.info", f"Version={cann}\nversion_dir={cann}\n")
    write(root, toolkit / "bin/atc", tool_script("atc"), mode=0o755)
    (root / toolkit / KERNEL_DIR / KERNELS_CHIP[profile.family]).mkdir(parents=True, exist_ok=True)
    latest = root / ASCEND / "ascend-toolkit/latest"
    if not latest.is_symlink():
        latest.symlink_to(cann)
    ascend_home = shlex.quote(str(root.resolve() / ASCEND))
    write(
        root,
        ASCEND / "ascend-toolkit/set_env.sh",
        f"export ASCEND_TOOLKIT_HOME={ascend_home}/ascend-toolkit/latest\n"
        "export ASCEND_HOME_PATH=${ASCEND_TOOLKIT_HOME}\n"
        "export LD_LIBRARY_PATH=${ASCEND_TOOLKIT_HOME}/lib64:${ASCEND_TOOLKIT_HOME}/lib64/plugin/opskernel:"
        "${LD_LIBRARY_PATH}\n"
        "export PATH=${ASCEND_TOOLKIT_HOME}/bin:${ASCEND_TOOLKIT_HOME}/compiler/ccec_compiler/bin:${PATH}\n"
        "export ASCEND_OPP_PATH=${ASCEND_TOOLKIT_HOME}/opp\n"
        "export ASCEND_AICPU_PATH=${ASCEND_TOOLKIT_HOME}\n",
    )

    nnal = ASCEND / "nnal/atb"
    write(
        root,
        nnal / cann / "version.info",
        f"Ascend-cann-atb : {cann}\nAscend-cann-atb Version : {cann}.B020\nPlatform : {ARCH}\n",
    )
    (root / nnal / cann / "atb/cxx_abi_0/lib").mkdir(parents=True, exist_ok=True)
    (root / nnal / cann / "atb/cxx_abi_1/lib").mkdir(parents=True, exist_ok=True)
    nnal_latest = root / nnal / "latest"
    if not nnal_latest.is_symlink():
        nnal_latest.symlink_to(cann)
    write(
        root,
        nnal / "set_env.sh",
        f"export ATB_HOME_PATH={ascend_home}/nnal/atb/latest/atb/cxx_abi_${{ATB_CXX_ABI:-0}}\n"
        "export LD_LIBRARY_PATH=${ATB_HOME_PATH}/lib:${LD_LIBRARY_PATH}\n",
    )
