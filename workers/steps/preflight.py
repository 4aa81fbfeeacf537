"""Preflight: a checklist over facts already collected from a host, before anything is installed.

Pure functions over a dict (facts.collect_host_facts and versions.find_versions gather it):
    arch            "aarch64"
    os_release      {"ID": "openEuler", "VERSION_ID": "22.03", "PRETTY_NAME": "openEuler 22.03 (LTS-SP4)"}
    kernel          "5.10.0-182.0.0.95.oe2203sp3.aarch64";  kernel_headers: bool (kernel-devel for uname -r)
    driver_loaded   bool;  npus: [{"id": 0, "health": "OK"}, ...]
    chip, driver, firmware, cann                     as in the install plan's host state
    disk_free       {path: free bytes} for the Ascend root and the venv root (nearest existing parent)
    hugepages       {"total": int, "free": int}
    pythons         {"3.11": "/usr/bin/python3.11"}
    tools           {"gcc": path or None, "make": ..., "numactl": ...}
    mirror_reachable  bool or None (not probed);  offline_bundle: bool or None
    packages_present  file names found in the packages folder

run_preflight(facts, profile, steps, options) -> [{"check", "status": pass|warn|fail, "detail", "fix"}]
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from workers.ascend.compat import MISMATCH, UNVERIFIED, Profile, check
from workers.i18n import gettext_noop as _
from workers.steps.base import StepSpec
from workers.steps.plan import InstallOptions

PASS = "pass"  # noqa: S105 - a checklist status, not a password
WARN = "warn"
FAIL = "fail"
GIB = 1024**3

# Rough installed sizes with headroom (GiB); the real packages unpack to about this much.
DISK_NEEDS_GIB = {"driver": 1, "firmware": 1, "cann_toolkit": 8, "ops": 6, "nnal": 2, "venv": 1, "pip": 12}

SUPPORTED_OS = {
    "openeuler": ("22.03",),
    "kylin": ("v10",),
    "ubuntu": ("22.04",),
}


def item(check_name: str, status: str, detail: str, fix: str = "", **params) -> dict[str, Any]:
    """One checklist line. With `params`, `detail` and `fix` are English templates ({name} placeholders):
    the entry keeps them and the params as well as the filled text, so the panel can show the line in the
    viewer's language (the checklist_text filter) while API clients read plain English."""
    if not params:
        return {"check": check_name, "status": status, "detail": detail, "fix": fix}
    return {
        "check": check_name,
        "status": status,
        "detail": detail.format(**params),
        "fix": fix.format(**params),
        "templates": {"detail": detail, "fix": fix},
        "params": params,
    }


def check_arch(facts: dict) -> dict:
    arch = facts.get("arch")
    if arch == "aarch64":
        return item("architecture", PASS, "aarch64 (Kunpeng)")
    if arch == "x86_64":
        return item(
            "architecture",
            WARN,
            _("x86_64: supported by vllm-ascend, but torch wheels come from the PyTorch CPU index"),
            _("Add https://download.pytorch.org/whl/cpu/ as an extra pip index."),
        )
    return item(
        "architecture",
        FAIL,
        _("{arch} is not supported by Ascend software"),
        _("Use an aarch64 (Kunpeng) or x86_64 host."),
        arch=arch,
    )


def check_os(facts: dict) -> dict:
    release = facts.get("os_release") or {}
    name = release.get("PRETTY_NAME") or release.get("ID") or _("unknown")
    versions = SUPPORTED_OS.get(str(release.get("ID", "")).lower())
    if versions and any(str(release.get("VERSION_ID", "")).lower().startswith(v) for v in versions):
        return item("os", PASS, name)
    return item(
        "os",
        WARN,
        _("{name} is not one of the tested systems"),
        _(
            "Prefer openEuler 22.03 LTS SPx, Kylin V10 or Ubuntu 22.04; "
            "check Huawei's OS list for your driver."
        ),
        name=name,
    )


def check_kernel(facts: dict, steps: list[StepSpec]) -> dict:
    kernel = facts.get("kernel") or _("unknown")
    installs_driver = any(step.name == "driver" for step in steps)
    if installs_driver and facts.get("kernel_headers") is False:
        return item(
            "kernel",
            FAIL,
            _("{kernel}: no kernel headers, the driver installer cannot build its module"),
            _("Install kernel-devel / linux-headers for {kernel} (the running kernel)."),
            kernel=kernel,
        )
    return item("kernel", PASS, kernel)


def check_npus(facts: dict, steps: list[StepSpec]) -> dict:
    if not facts.get("driver"):
        if any(step.name == "driver" for step in steps):
            return item(
                "npus",
                WARN,
                _("No NPU driver yet; the plan installs it"),
                _("Nothing to do before installing."),
            )
        return item("npus", FAIL, _("No NPU driver installed"), _("Upload the driver and firmware packages."))
    if not facts.get("driver_loaded"):
        return item(
            "npus",
            FAIL,
            _("The NPU driver is installed but not loaded"),
            _("Reboot the host (a driver install asks for it), then run the checks again."),
        )
    npus = facts.get("npus") or []
    if not npus:
        return item(
            "npus",
            FAIL,
            _("npu-smi lists no NPU"),
            _("Check the cards are seated and see dmesg for davinci errors."),
        )
    bad = [f"{n['id']}:{n.get('health')}" for n in npus if str(n.get("health", "")).upper() != "OK"]
    if not bad:
        return item("npus", PASS, _("{count} NPUs, all OK"), count=len(npus))
    status = FAIL if any(not b.upper().endswith("WARNING") for b in bad) else WARN
    return item(
        "npus",
        status,
        _("Unhealthy NPUs: {bad}"),
        _("Read `npu-smi info -t health -i <id>` and fix or replace those cards before serving."),
        bad=", ".join(bad),
    )


def check_versions(facts: dict, profile: Profile) -> list[dict]:
    verdict = check(
        vllm_ascend=profile.vllm_ascend,
        cann=facts.get("cann"),
        chip=facts.get("chip"),
        driver=facts.get("driver"),
    )
    results = []
    for problem in verdict.problems:
        if problem.component == "chip":
            results.append(
                item("chip", FAIL, problem.hint, _("Pick another node, or a release that supports it."))
            )
        elif problem.kind == UNVERIFIED:
            results.append(
                item(problem.component, WARN, problem.hint, _("Proceed only if you verified it yourself."))
            )
        elif problem.kind == MISMATCH:
            results.append(
                item(
                    problem.component,
                    WARN,
                    _("{component} {have}, the profile needs {need}"),
                    _("The install plan replaces it."),
                    component=problem.component,
                    have=problem.have,
                    need=problem.need,
                )
            )
    judged = {r["check"] for r in results}
    for component in ("chip", "driver", "cann"):
        if component not in judged:
            have = facts.get(component)
            detail = have if have else _("not installed (the plan installs it)")
            results.append(item(component, PASS, str(detail)))
    if facts.get("driver") and not facts.get("firmware"):
        results.append(
            item(
                "firmware",
                WARN,
                _("No firmware version found"),
                _("Install the firmware that ships with the driver."),
            )
        )
    elif facts.get("firmware"):
        results.append(item("firmware", PASS, facts["firmware"]))
    return results


def _needs_by_location(steps: list[StepSpec], options: InstallOptions) -> dict[str, int]:
    needs: dict[str, int] = {}
    for step in steps:
        if step.kind == "run_package":
            location, gib = options.ascend_root, DISK_NEEDS_GIB.get(step.name, 1)
        elif step.kind in ("venv", "pip_install"):
            location, gib = options.venv_root, DISK_NEEDS_GIB["venv" if step.kind == "venv" else "pip"]
        else:
            continue
        needs[location] = needs.get(location, 0) + gib * GIB
    return needs


def _free_at(disk_free: dict[str, int], location: str) -> int | None:
    """Free bytes at the deepest measured path that contains location."""
    best, best_len = None, -1
    for path, free in disk_free.items():
        if PurePosixPath(location).is_relative_to(path) and len(path) > best_len:
            best, best_len = free, len(path)
    return best


def check_disk(facts: dict, steps: list[StepSpec], options: InstallOptions) -> list[dict]:
    results = []
    for location, need in _needs_by_location(steps, options).items():
        free = _free_at(facts.get("disk_free") or {}, location)
        detail = _("{location}: {free} GiB free, the planned steps need about {need} GiB")
        if free is None:
            results.append(
                item(
                    "disk",
                    WARN,
                    _("{location}: free space not measured"),
                    _("Check `df -h {location}`."),
                    location=location,
                )
            )
            continue
        values: dict[str, Any] = {"location": location, "free": round(free / GIB, 1), "need": need // GIB}
        if free >= need:
            results.append(item("disk", PASS, detail, **values))
        else:
            results.append(
                item(
                    "disk",
                    FAIL,
                    detail,
                    _("Free space on {location} or choose another install path."),
                    **values,
                )
            )
    return results


def check_hugepages(facts: dict) -> dict:
    pages = facts.get("hugepages") or {}
    total, free = pages.get("total"), pages.get("free")
    if total is None:
        return item(
            "hugepages", WARN, _("not measured"), _("Check /proc/meminfo (HugePages_Total / HugePages_Free).")
        )
    if total > 0 and not free:
        return item(
            "hugepages",
            WARN,
            _("all {total} huge pages are in use"),
            _("Stop what holds them or raise vm.nr_hugepages before serving."),
            total=total,
        )
    return item("hugepages", PASS, _("{total} configured, {free} free"), total=total, free=free or 0)


def found_python(pythons: dict[str, str], wanted: list[str]) -> dict | None:
    """The passing "python" item for the first wanted minor version the host has, else None."""
    minor = next((minor for minor in wanted if minor in pythons), None)
    if minor is None:
        return None
    return item("python", PASS, _("python{minor} at {path}"), minor=minor, path=pythons[minor])


def check_python(facts: dict, profile: Profile) -> dict:
    pythons = facts.get("pythons") or {}
    wanted = profile.python_versions()
    found = found_python(pythons, wanted)
    if found:
        return found
    return item(
        "python",
        FAIL,
        _("No Python {range} (found: {found})"),
        _(
            "Install python{minor} "
            "(openEuler: dnf install python{minor}; Ubuntu: apt install python{minor}-venv)."
        ),
        range=profile.python_range,
        found=", ".join(pythons) or _("none"),
        minor=wanted[0],
    )


def check_tools(facts: dict, steps: list[StepSpec]) -> list[dict]:
    tools = facts.get("tools") or {}
    installs_driver = any(step.name == "driver" for step in steps)
    results = []
    for tool in ("gcc", "make"):
        if tools.get(tool):
            results.append(item(tool, PASS, tools[tool]))
        else:
            results.append(
                item(
                    tool,
                    FAIL if installs_driver else WARN,
                    _("{tool} not found; the driver installer builds its kernel module with it"),
                    _("Install {tool} (dnf/apt install {tool})."),
                    tool=tool,
                )
            )
    if tools.get("numactl"):
        results.append(item("numactl", PASS, tools["numactl"]))
    else:
        results.append(
            item(
                "numactl",
                WARN,
                _("numactl not found; engines cannot be bound to their NPUs' NUMA node"),
                _("Install numactl."),
            )
        )
    return results


def check_sources(facts: dict, steps: list[StepSpec]) -> list[dict]:
    results = []
    present = set(facts.get("packages_present") or [])
    missing = [
        PurePosixPath(s.params["path"]).name
        for s in steps
        if s.kind == "run_package" and PurePosixPath(s.params["path"]).name not in present
    ]
    if missing:
        results.append(
            item(
                "packages",
                FAIL,
                _("Missing packages: {names}"),
                _("Upload them to the Package store."),
                names=", ".join(missing),
            )
        )
    elif any(s.kind == "run_package" for s in steps):
        results.append(item("packages", PASS, _("All .run packages are in the Package store")))
    if not any(s.kind == "pip_install" for s in steps):
        return results
    if facts.get("offline_bundle"):
        results.append(item("pip_source", PASS, _("Offline wheelhouse present")))
    elif facts.get("mirror_reachable"):
        results.append(item("pip_source", PASS, _("Package mirror reachable")))
    elif facts.get("mirror_reachable") is False:
        results.append(
            item(
                "pip_source",
                FAIL,
                _("The package mirror is not reachable and there is no offline bundle"),
                _("Fix the mirror URL / proxy, or upload an offline wheelhouse."),
            )
        )
    else:
        results.append(
            item(
                "pip_source", WARN, _("Package source not probed"), _("Run the checks with the mirror probe.")
            )
        )
    return results


def run_preflight(
    facts: dict[str, Any],
    profile: Profile,
    steps: list[StepSpec] | None = None,
    options: InstallOptions | None = None,
) -> list[dict[str, str]]:
    """The whole checklist, in the order an admin would fix things."""
    steps = steps or []
    options = options or InstallOptions()
    return [
        check_arch(facts),
        check_os(facts),
        check_kernel(facts, steps),
        check_npus(facts, steps),
        *check_versions(facts, profile),
        *check_disk(facts, steps, options),
        check_hugepages(facts),
        check_python(facts, profile),
        *check_tools(facts, steps),
        *check_sources(facts, steps),
    ]


def worst(checklist: list[dict[str, str]]) -> str:
    statuses = {entry["status"] for entry in checklist}
    return FAIL if FAIL in statuses else WARN if WARN in statuses else PASS
