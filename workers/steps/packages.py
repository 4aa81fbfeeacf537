"""File names and install flags of Huawei's .run packages.

Names as Huawei publishes them (see the sources in the report of this module's commit):
  driver    Ascend-hdk-910b-npu-driver_24.1.rc2_linux-aarch64.run   (A3: Atlas-A3-hdk-npu-driver_...)
  firmware  Ascend-hdk-910b-npu-firmware_7.5.0.1.129.run            (A3: Atlas-A3-hdk-npu-firmware_...)
  toolkit   Ascend-cann-toolkit_8.3.RC2_linux-aarch64.run
  ops       before CANN 8.5.0: Ascend-cann-kernels-910b_8.3.RC2_linux-aarch64.run,
            Atlas-A3-cann-kernels_8.3.RC2_linux-aarch64.run;
            from 8.5.0 on ("kernels" renamed "ops"): Ascend-cann-910b-ops_8.5.0_linux-aarch64.run,
            Ascend-cann-A3-ops_8.5.0_linux-aarch64.run
  nnal      Ascend-cann-nnal_8.3.RC2_linux-aarch64.run
"""

from __future__ import annotations

from workers.ascend.vercmp import Version

DRIVER = "driver"
FIRMWARE = "firmware"
TOOLKIT = "toolkit"
OPS = "ops"
NNAL = "nnal"
KINDS = (DRIVER, FIRMWARE, TOOLKIT, OPS, NNAL)

DEFAULT_ASCEND_ROOT = "/usr/local/Ascend"
OPS_RENAMED_IN = "8.5.0"  # CANN 8.5.0 release notes: "算子包命名kernels更改为ops"


def _hdk_prefix(chip: str) -> str:
    return "Atlas-A3-hdk" if chip == "a3" else f"Ascend-hdk-{chip}"


def package_filename(kind: str, version: str, *, chip: str = "910b", arch: str = "aarch64") -> str:
    """The file name Huawei gives the package of this kind, version, chip and CPU architecture."""
    if kind == DRIVER:
        return f"{_hdk_prefix(chip)}-npu-driver_{version}_linux-{arch}.run"
    if kind == FIRMWARE:
        return f"{_hdk_prefix(chip)}-npu-firmware_{version}.run"
    if kind == TOOLKIT:
        return f"Ascend-cann-toolkit_{version}_linux-{arch}.run"
    if kind == NNAL:
        return f"Ascend-cann-nnal_{version}_linux-{arch}.run"
    if kind == OPS:
        if Version(version) >= Version(OPS_RENAMED_IN):
            name = "Ascend-cann-A3-ops" if chip == "a3" else f"Ascend-cann-{chip}-ops"
        else:
            name = "Atlas-A3-cann-kernels" if chip == "a3" else f"Ascend-cann-kernels-{chip}"
        return f"{name}_{version}_linux-{arch}.run"
    raise ValueError(f"unknown package kind {kind!r}; expected one of {', '.join(KINDS)}")


def install_flags(kind: str, ascend_root: str = DEFAULT_ASCEND_ROOT) -> list[str]:
    """The flags that install a package unattended.

    Driver: --full --install-for-all (the runtime is used by a service user, not only root). Firmware:
    --full. Toolkit: --full. Ops and NNAL: --install. --quiet accepts the EULA without a prompt.
    --install-path is given only for a non-default root, as Huawei's guides do.
    """
    flags = {
        DRIVER: ["--full", "--install-for-all"],
        FIRMWARE: ["--full"],
        TOOLKIT: ["--full"],
        OPS: ["--install"],
        NNAL: ["--install"],
    }.get(kind)
    if flags is None:
        raise ValueError(f"unknown package kind {kind!r}; expected one of {', '.join(KINDS)}")
    flags = [*flags, "--quiet"]
    if ascend_root.rstrip("/") != DEFAULT_ASCEND_ROOT:
        flags.append(f"--install-path={ascend_root}")
    return flags
