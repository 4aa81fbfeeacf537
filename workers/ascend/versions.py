"""Versions of the Ascend stack, read from the files its installers leave behind.

Known files (all plain text):
- driver/version.info and firmware/version.info: `Version=...`, driver files may add `package_version=`.
- ascend_toolkit_install.info: `package_name=Ascend-cann-toolkit`, `version=`, `arch=`; it lives under
  ascend-toolkit/<ver>/<arch>-linux/ before CANN 8.5 and under cann-<ver>/<arch>-linux/ from 8.5 on.
- version.cfg: `toolkit_running_version=[inner:version]`, `toolkit_installed_version=[..][..]`.
- ascend_nnae_install.info: like the toolkit's, with `package_name=Ascend-cann-nnae`.
- nnal/atb/latest/version.info: `Ascend-cann-atb : 8.2.RC2`, `Platform : aarch64`.

`python -m workers.ascend.versions FILE` prints {"component", "version", "arch"} for one file.
"""

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import PurePosixPath

DRIVER = "driver"
FIRMWARE = "firmware"
CANN_TOOLKIT = "cann-toolkit"
NNAE = "nnae"
NNAL = "nnal"

PACKAGE_COMPONENTS = {
    "ascend-cann-toolkit": CANN_TOOLKIT,
    "ascend-cann-nnae": NNAE,
    "ascend-cann-nnal": NNAL,
    "ascend-cann-atb": NNAL,
}
INSTALL_INFO_COMPONENTS = {
    "ascend_toolkit_install.info": CANN_TOOLKIT,
    "ascend_nnae_install.info": NNAE,
    "ascend_nnal_install.info": NNAL,
}
# Keys that only one of the two version.info files carries.
FIRMWARE_KEYS = {"firmware_version", "compatible_version_drv"}
DRIVER_KEYS = {"ascendhal_version", "compatible_version_fw", "aicpu_version", "tsfw_version"}
# version.cfg keys are <part>_running_version / <part>_installed_version; these parts name the package.
CFG_PARTS = {"toolkit": CANN_TOOLKIT, "nnae": NNAE}

KNOWN_FILES_HINT = (
    "expected driver/ or firmware/version.info, ascend_toolkit_install.info, version.cfg, "
    "ascend_nnae_install.info or nnal/atb/.../version.info"
)


class UnknownVersionFile(ValueError):
    """The text is not one of the Ascend version files this module knows."""


@dataclass(frozen=True)
class ComponentVersion:
    component: str
    version: str
    arch: str | None


def parse_key_values(text: str) -> dict[str, str]:
    """Read `key=value` and `key : value` lines; comments and [section] headers are skipped."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "[")):
            continue
        equals, colon = line.find("="), line.find(":")
        if equals > 0 and (colon < 0 or equals < colon):
            key, value = line[:equals], line[equals + 1 :]
        elif colon > 0:
            key, value = line[:colon], line[colon + 1 :]
        else:
            continue
        values.setdefault(key.strip(), value.strip())
    return values


def component_from_content(values: dict[str, str]) -> str | None:
    package = values.get("package_name", "").lower()
    if package in PACKAGE_COMPONENTS:
        return PACKAGE_COMPONENTS[package]
    if "Ascend-cann-atb" in values:
        return NNAL
    for part, component in CFG_PARTS.items():
        if f"{part}_running_version" in values or f"{part}_installed_version" in values:
            return component
    if "Version" in values:
        if FIRMWARE_KEYS & values.keys():
            return FIRMWARE
        if DRIVER_KEYS & values.keys():
            return DRIVER
    return None


def component_from_path(path: str) -> str | None:
    parts = PurePosixPath(path).parts
    name = parts[-1] if parts else ""
    folders = set(parts[:-1])
    if name in INSTALL_INFO_COMPONENTS:
        return INSTALL_INFO_COMPONENTS[name]
    if name == "version.info":
        for folder, component in ((DRIVER, DRIVER), (FIRMWARE, FIRMWARE), ("nnal", NNAL)):
            if folder in folders:
                return component
    if name == "version.cfg":
        if "nnae" in folders:
            return NNAE
        if "ascend-toolkit" in folders or any(_is_cann_folder(folder) for folder in folders):
            return CANN_TOOLKIT
    return None


def _is_cann_folder(folder: str) -> bool:
    return folder == "cann" or folder.startswith("cann-")


def _last_bracketed_version(value: str) -> str | None:
    # `[7.0.0.5.242:7.0.RC1][7.3.0.1.231:8.0.RC2]`: inner build id, then the release; the last is newest.
    pairs = re.findall(r"\[([^\]:]*):([^\]]+)\]", value)
    return pairs[-1][1].strip() if pairs else None


def _cfg_version(values: dict[str, str], component: str) -> str | None:
    parts = [part for part, owner in CFG_PARTS.items() if owner == component]
    for part in parts:
        for state in ("running", "installed"):
            version = _last_bracketed_version(values.get(f"{part}_{state}_version", ""))
            if version:
                return version
    return None


def _version_and_arch(values: dict[str, str], component: str) -> tuple[str | None, str | None]:
    if component in (DRIVER, FIRMWARE):
        return values.get("Version"), None
    if "Ascend-cann-atb" in values:
        return values["Ascend-cann-atb"], values.get("Platform")
    if "version" in values:
        return values["version"], values.get("arch")
    return _cfg_version(values, component), None


def parse_version_file(text: str, path: str | None = None) -> ComponentVersion:
    """Name the component from the content, or from the path when the content alone is ambiguous."""
    values = parse_key_values(text)
    component = component_from_content(values) or (component_from_path(path) if path else None)
    if component is None:
        raise UnknownVersionFile(f"{path or 'text'} is not a known Ascend version file ({KNOWN_FILES_HINT})")
    version, arch = _version_and_arch(values, component)
    if not version:
        raise UnknownVersionFile(f"{path or 'text'} looks like a {component} version file but has no version")
    return ComponentVersion(component=component, version=version, arch=arch or None)


# --- inventory: find the files on a host through a Runner -------------------------------------------

FIND_NAMES = (*INSTALL_INFO_COMPONENTS, "version.cfg")


def _fixed_candidates(root: str) -> list[str]:
    return [
        f"{root}/driver/version.info",
        f"{root}/firmware/version.info",
        f"{root}/nnal/atb/latest/version.info",
        f"{root}/ascend-toolkit/latest/version.cfg",
        f"{root}/cann/version.cfg",
    ]


async def _found_files(runner, root: str) -> list[str]:
    # -L: ascend-toolkit/latest and cann are symlinks to the versioned folders; find must follow them.
    name_tests: list[str] = []
    for name in FIND_NAMES:
        name_tests += [*(["-o"] if name_tests else []), "-name", name]
    result = await runner.run(["find", "-L", root, "-maxdepth", "4", "(", *name_tests, ")", "-type", "f"])
    # find exits non-zero on an unreadable folder or a symlink loop but still lists what it found.
    return [line.strip() for line in result.stdout.splitlines() if line.strip()]


def _version_key(version: str) -> tuple:
    # Natural order, where a number beats letters in the same place: 8.1.0 > 8.1.RC1 > 8.0.RC3.
    return tuple(
        (1, int(token), "") if token.isdigit() else (0, 0, token.lower())
        for token in re.findall(r"\d+|[A-Za-z]+", version)
    )


def _preference(path: str, info: ComponentVersion) -> tuple:
    parts = PurePosixPath(path).parts
    full_record = 0 if parts[-1] == "version.cfg" else 1  # install infos also carry the arch
    active = 1 if ("latest" in parts or "cann" in parts) else 0  # the links set_env.sh points at
    return (full_record, active, _version_key(info.version))


async def find_versions(runner, ascend_root: str = "/usr/local/Ascend") -> dict[str, dict]:
    """Versions of every Ascend component installed under ascend_root, keyed by component name."""
    root = ascend_root.rstrip("/") or "/"
    candidates = _fixed_candidates(root)
    candidates += [path for path in await _found_files(runner, root) if component_from_path(path)]
    best: dict[str, tuple[tuple, ComponentVersion, str]] = {}
    for path in dict.fromkeys(candidates):
        text = await runner.read_text(path)
        if text is None:
            continue
        try:
            info = parse_version_file(text, path)
        except UnknownVersionFile:
            continue
        preference = _preference(path, info)
        if info.component not in best or preference > best[info.component][0]:
            best[info.component] = (preference, info, path)
    return {
        component: {"version": info.version, "arch": info.arch, "path": path}
        for component, (_, info, path) in sorted(best.items())
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workers.ascend.versions", description="Print the Ascend component version in FILE."
    )
    parser.add_argument("file", metavar="FILE")
    args = parser.parse_args(argv)
    try:
        with open(args.file, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError as error:
        print(f"error: cannot read {args.file}: {error.strerror}", file=sys.stderr)
        return 2
    try:
        info = parse_version_file(text, args.file)
    except UnknownVersionFile as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(asdict(info)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
