"""Body of a simulated Huawei .run package (driver, firmware, CANN toolkit, ops, NNAL).

make_sim_package() writes this file after a shebang and a `PACKAGE = {...}` line, so the result runs
on its own: no import of workers, like a real self-extracting package. It takes the real packages'
flags, refuses bad ones, insists on the real order (driver before firmware and CANN, toolkit before
ops and NNAL) and writes the same version files the real packages write, under --install-path.
"""

import datetime
import json
import os
import shutil
import sys
from pathlib import Path

DEFAULT_ROOT = "/usr/local/Ascend"
ACTIONS = {
    "driver": ("--full", "--install", "--upgrade", "--uninstall", "--check"),
    "firmware": ("--full", "--upgrade", "--check"),
    "toolkit": ("--full", "--install", "--upgrade", "--uninstall", "--check"),
    "ops": ("--install", "--upgrade", "--uninstall", "--check"),
    "nnal": ("--install", "--upgrade", "--uninstall", "--check"),
}
MODIFIERS = ("--install-for-all", "--quiet")
TAGS = {"driver": "Driver", "firmware": "Firmware", "toolkit": "Toolkit", "ops": "Ops", "nnal": "NNAL"}


class InstallError(Exception):
    pass


def log(package, level, message, stream=None):
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{TAGS[package['kind']]}] [{stamp}] [{level}]{message}", file=stream or sys.stdout, flush=True)


def parse_flags(package, argv):
    allowed = ACTIONS[package["kind"]]
    actions, modifiers, root = [], set(), DEFAULT_ROOT
    for arg in argv:
        if arg.startswith("--install-path"):
            if not arg.startswith("--install-path=") or not arg.split("=", 1)[1]:
                raise InstallError("--install-path needs a value: --install-path=/path/to/Ascend")
            root = arg.split("=", 1)[1]
        elif arg in allowed:
            actions.append(arg)
        elif arg in MODIFIERS:
            modifiers.add(arg)
        else:
            valid = ", ".join([*allowed, *MODIFIERS, "--install-path=<path>"])
            raise InstallError(f"Unsupported parameter: {arg}. Valid parameters: {valid}")
    if len(actions) != 1:
        raise InstallError(f"Give exactly one of {', '.join(allowed)} (got {' '.join(actions) or 'none'})")
    return actions[0], modifiers, Path(root)


def write(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def relink(link, target):
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


def read_info(path):
    if not path.is_file():
        return {}
    pairs = (line.split("=", 1) for line in path.read_text(encoding="utf-8").splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def toolkit_home(package, root):
    """Where this CANN version lives: cann-<v> from 8.5.0 on, ascend-toolkit/<v> before."""
    if package["layout"] == "cann-dir":
        return root / f"cann-{package['version']}"
    return root / "ascend-toolkit" / package["version"]


def require_driver(package, root):
    if not (root / "driver" / "version.info").is_file():
        raise InstallError(
            f"The NPU driver is not installed under {root} (no driver/version.info). "
            "Install the Ascend HDK driver package first."
        )


def require_toolkit(package, root):
    home = toolkit_home(package, root)
    info = home / f"{package['arch']}-linux" / "ascend_toolkit_install.info"
    if not info.is_file():
        raise InstallError(
            f"CANN toolkit {package['version']} is not installed under {root} (no {info}). "
            f"Install Ascend-cann-toolkit_{package['version']} first."
        )
    return home


def install_driver(package, root, modifiers):
    info = root / "driver" / "version.info"
    before = read_info(info).get("Version")
    version = package["version"]
    write(
        info,
        [
            f"Version={version}",
            "ascendhal_version=7.35.23",
            "aicpu_version=1.0",
            "tdt_version=1.0",
            "log_version=1.0",
            "prof_version=2.0",
            "dvppkernels_version=1.1",
            "tsfw_version=1.0",
            "Innerversion=V100R001C21SPC001B210",
            "compatible_version=[V100R001C15],[V100R001C17],[V100R001C18],[V100R001C19],[V100R001C21]",
            "compatible_version_fw=[7.0.0,7.9.99]",
            f"package_version={version}",
        ],
    )
    (root / "driver" / "lib64").mkdir(parents=True, exist_ok=True)
    write(
        root / "driver" / "ascend_install.info",
        [
            "UserName=HwHiAiUser",
            "UserGroup=HwHiAiUser",
            f"Driver_Install_Type={'full'}",
            f"Driver_Install_For_All={'yes' if '--install-for-all' in modifiers else 'no'}",
            f"Driver_Install_Path_Param={root}",
        ],
    )
    if before == version:
        log(
            package,
            "INFO",
            "Driver package installed successfully! The new version takes effect immediately.",
        )
    else:
        log(
            package,
            "INFO",
            "Driver package installed successfully! Reboot needed for installation/upgrade to take effect!",
        )


def install_firmware(package, root, modifiers):
    require_driver(package, root)
    driver = read_info(root / "driver" / "version.info").get("Version", "")
    write(
        root / "firmware" / "version.info",
        [
            f"Version={package['version']}",
            "firmware_version=1.0",
            f"package_version={package.get('hdk_version') or driver}",
            f"compatible_version_drv=[{driver},{driver}.]",
        ],
    )
    log(
        package,
        "INFO",
        "Firmware package installed successfully! "
        "Reboot now or after driver installation for the installation/upgrade to take effect!",
    )


def set_env_lines(home):
    return [
        "#!/bin/sh",
        "# Written by the simulated CANN toolkit package.",
        f"export ASCEND_TOOLKIT_HOME={home}",
        f"export ASCEND_HOME_PATH={home}",
        f"export ASCEND_OPP_PATH={home}/opp",
        f"export LD_LIBRARY_PATH={home}/lib64:{home}/lib64/plugin/opskernel:${{LD_LIBRARY_PATH}}",
        f"export PATH={home}/bin:{home}/compiler/ccec_compiler/bin:${{PATH}}",
        f"export PYTHONPATH={home}/python/site-packages:${{PYTHONPATH}}",
    ]


def install_toolkit(package, root, modifiers):
    require_driver(package, root)
    version, arch = package["version"], package["arch"]
    home = toolkit_home(package, root)
    platform = home / f"{arch}-linux"
    write(
        platform / "ascend_toolkit_install.info",
        [
            "package_name=Ascend-cann-toolkit",
            f"version={version}",
            "innerversion=V100R001C23B101",
            "compatible_version=[V100R001C15],[V100R001C18],[V100R001C19],[V100R001C20],[V100R001C21]",
            f"arch={arch}",
            "os=linux",
            f"path={platform}",
        ],
    )
    components = ("runtime", "compiler", "opp", "toolkit", "aoe", "ncs", "hccl")
    write(
        home / "version.cfg",
        ["# version: 1.0", *(f"{c}_running_version=[7.8.0.1.100:{version}]" for c in components)],
    )
    (home / "lib64").mkdir(parents=True, exist_ok=True)
    (home / "bin").mkdir(parents=True, exist_ok=True)
    for name, text in package.get("bin", {}).items():
        write(home / "bin" / name, text.splitlines())
        (home / "bin" / name).chmod(0o755)
    write(home / "set_env.sh", set_env_lines(home))
    toolkit_dir = root / "ascend-toolkit"
    if package["layout"] == "cann-dir":
        relink(root / "cann", home.name)
        relink(toolkit_dir / "latest", Path("..") / home.name)
    else:
        relink(toolkit_dir / "latest", version)
        if (root / "cann").is_symlink():  # a newer-layout CANN was active; this one replaces it
            (root / "cann").unlink()
    write(toolkit_dir / "set_env.sh", set_env_lines(toolkit_dir / "latest"))
    log(package, "INFO", f"Ascend-cann-toolkit_{version} install success, installed in {home}.")
    log(
        package,
        "INFO",
        "Please make sure that the environment variables have been configured: "
        f"source {toolkit_dir / 'set_env.sh'}",
    )


def install_ops(package, root, modifiers):
    require_driver(package, root)
    home = require_toolkit(package, root)
    platform = home / f"{package['arch']}-linux"
    write(
        platform / "ascend_ops_install.info",
        [
            f"package_name={package['name']}",
            f"version={package['version']}",
            f"soc={package['chip']}",
            f"arch={package['arch']}",
            "os=linux",
            f"path={platform}",
        ],
    )
    (home / "opp" / "built-in" / "op_impl" / "ai_core" / "tbe" / "kernel" / package["chip"]).mkdir(
        parents=True, exist_ok=True
    )
    cfg = home / "version.cfg"
    lines = [
        line for line in cfg.read_text(encoding="utf-8").splitlines() if not line.startswith("opp_kernel_")
    ]
    write(cfg, [*lines, f"opp_kernel_running_version=[7.8.0.1.100:{package['version']}]"])
    log(package, "INFO", f"{package['name']}_{package['version']} install success, installed in {home}.")


def install_nnal(package, root, modifiers):
    require_driver(package, root)
    require_toolkit(package, root)
    version = package["version"]
    atb = root / "nnal" / "atb"
    write(atb / version / "version.info", [f"Ascend-cann-atb : {version}", f"Platform : {package['arch']}"])
    (atb / version / "atb" / "cxx_abi_1" / "lib").mkdir(parents=True, exist_ok=True)
    relink(atb / "latest", version)
    write(
        atb / "set_env.sh",
        [
            "#!/bin/sh",
            "# Written by the simulated NNAL package.",
            f"export ATB_HOME_PATH={atb / 'latest' / 'atb' / 'cxx_abi_1'}",
            f"export LD_LIBRARY_PATH={atb / 'latest' / 'atb' / 'cxx_abi_1' / 'lib'}:${{LD_LIBRARY_PATH}}",
        ],
    )
    log(package, "INFO", f"Ascend-cann-nnal_{version} install success, installed in {atb}.")


def uninstall(package, root):
    kind = package["kind"]
    if kind == "driver":
        targets = [root / "driver"]
    elif kind == "toolkit":
        targets = [toolkit_home(package, root)]
    elif kind == "nnal":
        targets = [root / "nnal" / "atb" / package["version"]]
    else:
        targets = [toolkit_home(package, root) / f"{package['arch']}-linux" / "ascend_ops_install.info"]
    for target in targets:
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    log(package, "INFO", f"{package['name']} uninstall success.")


INSTALLERS = {
    "driver": install_driver,
    "firmware": install_firmware,
    "toolkit": install_toolkit,
    "ops": install_ops,
    "nnal": install_nnal,
}


def accept_eula(package, modifiers):
    if "--quiet" in modifiers:
        return
    print(f"Do you accept the EULA to install {package['name']}?[y/n]", flush=True)
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise InstallError(
            "The EULA was not accepted; nothing was installed. Pass --quiet to accept it unattended."
        )


# On a sim host (ASCEND_PANEL_SIM_ROOT), every run that changes something is recorded under the host's tree,
# where Huawei's packages keep their operation log: one JSON line as it starts and one as it ends (time, pid,
# package, action, result), so a test can tell what ran on the host, when, and whether two runs overlapped.
RUN_RECORD = "var/log/ascend_seclog/operation.log"


def record_run(package, action, event, **extra):
    sim_root = os.environ.get("ASCEND_PANEL_SIM_ROOT")
    if not sim_root:
        return
    path = Path(sim_root) / RUN_RECORD
    path.parent.mkdir(parents=True, exist_ok=True)
    line = {"time": datetime.datetime.now().timestamp(), "pid": os.getpid(), "event": event}
    line.update(package=package["name"], kind=package["kind"], action=action, **extra)
    with open(path, "a", encoding="utf-8") as handle:  # one short write per line: appends do not mix
        handle.write(json.dumps(line) + "\n")


def main(package, argv):
    action = None
    try:
        action, modifiers, root = parse_flags(package, argv)
        print("Verifying archive integrity...  100%   SHA256 checksums are OK. All good.", flush=True)
        if action == "--check":
            return 0
        record_run(package, action, "start")
        print(f"Uncompressing {package['name']}  100%", flush=True)
        if action == "--uninstall":
            uninstall(package, root)
            record_run(package, action, "end", result="ok")
            return 0
        accept_eula(package, modifiers)
        log(package, "INFO", f"Start time: {datetime.datetime.now():%Y-%m-%d %H:%M:%S}")
        root.mkdir(parents=True, exist_ok=True)
        if not os.access(root, os.W_OK):
            raise InstallError(f"No write permission on {root}; run as root or pick another --install-path.")
        INSTALLERS[package["kind"]](package, root, modifiers)
        record_run(package, action, "end", result="ok")
        return 0
    except InstallError as error:
        log(package, "ERROR", str(error), sys.stderr)
        if action and action != "--check":
            record_run(package, action, "end", result="error")
        return 1


if __name__ == "__main__":
    # PACKAGE_JSON is the line make_sim_package writes above this file; neither checker can see it.
    sys.exit(main(json.loads(PACKAGE_JSON), sys.argv[1:]))  # type: ignore[name-defined]  # noqa: F821
