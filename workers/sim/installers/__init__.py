"""Simulated Huawei .run packages for the sim host.

    make_sim_package("driver", "24.1.rc2", out_dir)
    # -> out_dir/Ascend-hdk-910b-npu-driver_24.1.rc2_linux-aarch64.run

The file is an executable Python script (shebang: this interpreter) that behaves like the real package
on the command line and writes the real version files under --install-path (see script.py). The toolkit
package also installs the sim's atc in its bin/, as the real one does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from workers.ascend.vercmp import Version
from workers.sim.tree import tool_script
from workers.steps.packages import KINDS, OPS, OPS_RENAMED_IN, TOOLKIT, package_filename

SCRIPT = Path(__file__).with_name("script.py")


def _package_name(kind: str, filename: str) -> str:
    """Ascend-cann-toolkit from Ascend-cann-toolkit_8.3.RC2_linux-aarch64.run."""
    return filename.split("_", 1)[0]


def make_sim_package(
    kind: str,
    version: str,
    out_dir: Path | str,
    *,
    chip: str = "910b",
    arch: str = "aarch64",
    hdk_version: str | None = None,
) -> Path:
    """Write an executable simulated package named like Huawei's and return its path."""
    if kind not in KINDS:
        raise ValueError(f"unknown package kind {kind!r}; expected one of {', '.join(KINDS)}")
    filename = package_filename(kind, version, chip=chip, arch=arch)
    uses_new_layout = kind in (TOOLKIT, OPS, "nnal") and Version(version) >= Version(OPS_RENAMED_IN)
    package = {
        "kind": kind,
        "version": version,
        "chip": chip,
        "arch": arch,
        "name": _package_name(kind, filename),
        "hdk_version": hdk_version,
        # CANN 8.5.0 moved the default home from ascend-toolkit/<v> to cann-<v>.
        "layout": "cann-dir" if uses_new_layout else "ascend-toolkit",
        # Executables the package puts in <home>/bin: the sim's, running from this checkout.
        "bin": {"atc": tool_script("atc")} if kind == TOOLKIT else {},
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / filename
    header = f"#!{sys.executable}\nPACKAGE_JSON = {json.dumps(package)!r}\n"
    path.write_text(header + SCRIPT.read_text(encoding="utf-8"), encoding="utf-8")
    path.chmod(0o755)
    return path
