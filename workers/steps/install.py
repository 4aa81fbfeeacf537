"""The install steps a plan is made of, and build_step() that turns a StepSpec into one."""

from __future__ import annotations

import json
import re
from pathlib import PurePosixPath
from typing import Any

from workers.ascend.vercmp import Version, VersionError, same
from workers.ascend.versions import UnknownVersionFile, parse_version_file
from workers.i18n import gettext_noop as _
from workers.steps.base import PipSource, RebootRequired, Step, StepContext, StepSpec
from workers.steps.packages import DRIVER, FIRMWARE, NNAL, OPS, OPS_RENAMED_IN, TOOLKIT

REBOOT_WORDING = re.compile(r"\breboot", re.IGNORECASE)
BOOT_ID = "/proc/sys/kernel/random/boot_id"
PACKAGE_TIMEOUT_S = 3600
PIP_TIMEOUT_S = 3600
VERIFY_TIMEOUT_S = 600

# Prints {"name": "version" or null} for each distribution named on the command line.
INSTALLED_VERSIONS = (
    "import importlib.metadata as m, json, sys\n"
    "def v(n):\n"
    "    try:\n"
    "        return m.version(n)\n"
    "    except m.PackageNotFoundError:\n"
    "        return None\n"
    "print(json.dumps({n: v(n) for n in sys.argv[1:]}))\n"
)
# Sources each script given before "--" (stopping at the first that fails), then runs the rest.
WITH_ENV_SCRIPTS = 'while [ "$1" != "--" ]; do . "$1" || exit 97; shift; done; shift; exec "$@"'


def venv_python(venv: str) -> str:
    return str(PurePosixPath(venv) / "bin" / "python")


def with_set_env(scripts: list[str], argv: list[str]) -> list[str]:
    """argv run after sourcing the CANN / NNAL set_env.sh scripts; paths go in as arguments, never as code."""
    if not scripts:
        return argv
    return ["bash", "-c", WITH_ENV_SCRIPTS, "bash", *scripts, "--", *argv]


def _same(have: str | None, need: str) -> bool:
    try:
        return have is not None and same(have, need)
    except VersionError:
        return False


class RunPackageStep(Step):
    """Run one Huawei .run package (driver, firmware, toolkit, ops, NNAL) with its unattended flags."""

    def __init__(
        self,
        name: str,
        title: str,
        package: str,
        version: str,
        path: str,
        flags: list[str],
        arch: str,
        **unused,
    ):
        super().__init__(name, title)
        self.package, self.version, self.path, self.flags, self.arch = package, version, path, flags, arch

    def _home(self, root: PurePosixPath) -> PurePosixPath:
        """Where the CANN version lives: cann-<v> from 8.5.0 on, ascend-toolkit/<v> before."""
        if Version(self.version) >= Version(OPS_RENAMED_IN):
            return root / f"cann-{self.version}"
        return root / "ascend-toolkit" / self.version

    async def installed_version(self, ctx: StepContext) -> str | None:
        root = PurePosixPath(ctx.ascend_root)
        if self.package == OPS:
            text = await ctx.runner.read_text(str(self._home(root) / "version.cfg"))
            match = re.search(r"^opp_kernel_running_version=\[[^:\]]*:([^\]]+)\]", text or "", re.MULTILINE)
            return match.group(1) if match else None
        path = {
            DRIVER: root / "driver" / "version.info",
            FIRMWARE: root / "firmware" / "version.info",
            TOOLKIT: self._home(root) / f"{self.arch}-linux" / "ascend_toolkit_install.info",
            NNAL: root / "nnal" / "atb" / "latest" / "version.info",
        }[self.package]
        text = await ctx.runner.read_text(str(path))
        if text is None:
            return None
        try:
            return parse_version_file(text, str(path)).version
        except UnknownVersionFile:
            return None

    async def check(self, ctx: StepContext) -> bool:
        return _same(await self.installed_version(ctx), self.version)

    async def do(self, ctx: StepContext) -> None:
        present = await ctx.runner.run(["test", "-x", self.path])
        if not present.ok:
            raise self.fail(
                _("package {path} is missing or not executable").format(path=self.path),
                hint=_("Upload {name} to the Package store, then retry.").format(
                    name=PurePosixPath(self.path).name
                ),
            )
        result = await self.run_command(ctx, [self.path, *self.flags], timeout=PACKAGE_TIMEOUT_S)
        if not result.ok:
            raise self.fail(_("{name} failed").format(name=PurePosixPath(self.path).name), result)
        if self.package in (DRIVER, FIRMWARE) and REBOOT_WORDING.search(result.stdout + result.stderr):
            ctx.state["reboot_required"] = True
            marker = str(PurePosixPath(ctx.work_dir) / "reboot-required")
            # Remember which boot asked for the reboot, so the reboot step knows when it has happened.
            await ctx.runner.run(["mkdir", "-p", ctx.work_dir])
            await ctx.runner.run(["cp", BOOT_ID, marker])

    async def verify(self, ctx: StepContext) -> None:
        have = await self.installed_version(ctx)
        if not _same(have, self.version):
            raise self.fail(
                _("{package} reports version {have} after installing {want}").format(
                    package=self.package, have=have, want=self.version
                )
            )


class RebootStep(Step):
    """Satisfied unless an installer asked for a reboot during a boot that is still running."""

    def __init__(self, name: str, title: str, marker: str, allow: bool = False, **unused):
        super().__init__(name, title)
        self.marker, self.allow = marker, allow

    async def check(self, ctx: StepContext) -> bool:
        asked_in = await ctx.runner.read_text(self.marker)
        if asked_in is None:
            return True
        if asked_in.strip() != (await ctx.runner.read_text(BOOT_ID) or "").strip():
            await ctx.runner.run(["rm", "-f", self.marker])  # rebooted since: done
            return True
        return False

    async def do(self, ctx: StepContext) -> None:
        if self.allow:
            await self.run_command(ctx, ["systemctl", "reboot"])
        raise RebootRequired(
            self.name,
            _("the NPU driver asked for a reboot"),
            hint=_("Reboot the host, then run the install again: finished steps are skipped."),
        )


class VenvStep(Step):
    def __init__(self, name: str, title: str, python: str, minor: str, venv: str, **unused):
        super().__init__(name, title)
        self.python, self.minor, self.venv = python, minor, venv

    async def check(self, ctx: StepContext) -> bool:
        result = await ctx.runner.run(
            [venv_python(self.venv), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]
        )
        return result.ok and result.stdout.strip() == self.minor

    async def do(self, ctx: StepContext) -> None:
        result = await self.run_command(ctx, [self.python, "-m", "venv", "--clear", self.venv], timeout=600)
        if not result.ok:
            raise self.fail(
                _("could not create the venv {venv}").format(venv=self.venv),
                result,
                hint=_("Install the venv module for {python} (e.g. python3-venv) and retry.").format(
                    python=self.python
                ),
            )


async def installed(ctx: StepContext, venv: str, names: list[str]) -> dict[str, str | None]:
    result = await ctx.runner.run([venv_python(venv), "-c", INSTALLED_VERSIONS, *names])
    if not result.ok:
        return dict.fromkeys(names)
    return json.loads(result.stdout.strip().splitlines()[-1])


class PipInstallStep(Step):
    def __init__(
        self,
        name: str,
        title: str,
        venv: str,
        requirements: list[str],
        pins: dict,
        pip: dict,
        no_deps: bool = False,
        **unused,
    ):
        super().__init__(name, title)
        self.venv, self.requirements, self.pins, self.pip = venv, requirements, pins, PipSource.from_dict(pip)
        # For packages whose own requirements cannot be resolved but are not needed (a meta package pinning
        # a backend wheel that has no build for this Python): every pin must then be given explicitly.
        self.no_deps = no_deps

    async def check(self, ctx: StepContext) -> bool:
        have = await installed(ctx, self.venv, list(self.pins))
        return all(
            have.get(name) is not None and (want is None or _same(have[name], want))
            for name, want in self.pins.items()
        )

    async def do(self, ctx: StepContext) -> None:
        argv = [venv_python(self.venv), "-m", "pip", "install", *self.pip.pip_args()]
        argv += ["--no-deps", *self.requirements] if self.no_deps else self.requirements
        result = await self.run_command(ctx, argv, timeout=PIP_TIMEOUT_S)
        if not result.ok:
            source = self.pip.wheelhouse or self.pip.index_url or _("the default index")
            raise self.fail(
                _("pip could not install {what}").format(what=" ".join(self.requirements)),
                result,
                hint=_("Check that {source} has these versions for this Python and CPU.").format(
                    source=source
                ),
            )


class PipUninstallStep(Step):
    def __init__(self, name: str, title: str, venv: str, packages: list[str], **unused):
        super().__init__(name, title)
        self.venv, self.packages = venv, packages

    async def check(self, ctx: StepContext) -> bool:
        return all(version is None for version in (await installed(ctx, self.venv, self.packages)).values())

    async def do(self, ctx: StepContext) -> None:
        result = await self.run_command(
            ctx, [venv_python(self.venv), "-m", "pip", "uninstall", "-y", *self.packages]
        )
        if not result.ok:
            raise self.fail(_("pip could not remove {what}").format(what=" ".join(self.packages)), result)


class PipCheckStep(Step):
    """Always runs: a resolver conflict is cheap to find and expensive to discover at launch."""

    def __init__(self, name: str, title: str, venv: str, **unused):
        super().__init__(name, title)
        self.venv = venv

    async def check(self, ctx: StepContext) -> bool:
        return False

    async def do(self, ctx: StepContext) -> None:
        result = await self.run_command(ctx, [venv_python(self.venv), "-m", "pip", "check"])
        if not result.ok:
            raise self.fail(
                _("pip check found broken requirements"),
                result,
                hint=_("Install the versions of the chosen profile only; see the lines above."),
            )

    async def verify(self, ctx: StepContext) -> None:
        return None


class VerifyNpuStep(Step):
    COUNT = "import torch, torch_npu; print(torch.npu.device_count())"

    def __init__(self, name: str, title: str, venv: str, set_env: list[str], expected: int | None, **unused):
        super().__init__(name, title)
        self.venv, self.set_env, self.expected = venv, set_env, expected

    async def check(self, ctx: StepContext) -> bool:
        return False

    async def do(self, ctx: StepContext) -> None:
        argv = with_set_env(self.set_env, [venv_python(self.venv), "-c", self.COUNT])
        result = await self.run_command(ctx, argv, timeout=VERIFY_TIMEOUT_S)
        if not result.ok:
            raise self.fail(
                _("torch_npu does not load"), result, hint=_("Check the driver, CANN and torch-npu versions.")
            )
        seen = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
        if self.expected is not None and seen != str(self.expected):
            raise self.fail(
                _("torch.npu.device_count() is {seen}, npu-smi shows {expected}").format(
                    seen=seen, expected=self.expected
                ),
                result,
                hint=_("Check ASCEND_RT_VISIBLE_DEVICES and that every NPU is healthy in npu-smi info."),
            )

    async def verify(self, ctx: StepContext) -> None:
        return None


class VerifyVllmStep(Step):
    def __init__(
        self,
        name: str,
        title: str,
        venv: str,
        set_env: list[str],
        version: str | None,
        import_only: bool = False,
        **unused,
    ):
        super().__init__(name, title)
        self.venv, self.set_env, self.version, self.import_only = venv, set_env, version, import_only

    async def check(self, ctx: StepContext) -> bool:
        return False

    async def do(self, ctx: StepContext) -> None:
        python = venv_python(self.venv)
        result = await self.run_command(
            ctx,
            with_set_env(self.set_env, [python, "-c", "import vllm; print(vllm.__version__)"]),
            timeout=VERIFY_TIMEOUT_S,
        )
        if not result.ok:
            raise self.fail(_("vllm does not import"), result)
        seen = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
        if self.version and not _same(seen, self.version):
            raise self.fail(
                _("vllm reports {seen}, expected {want}").format(seen=seen, want=self.version), result
            )
        if self.import_only:
            return
        server = [python, "-m", "vllm.entrypoints.openai.api_server", "--help"]
        result = await self.run_command(ctx, with_set_env(self.set_env, server), timeout=VERIFY_TIMEOUT_S)
        if not result.ok:
            raise self.fail(_("the vLLM OpenAI server does not start"), result)

    async def verify(self, ctx: StepContext) -> None:
        return None


class RecordStackStep(Step):
    """Writes what the launch step needs (venv, set_env scripts, versions) next to the venv."""

    WRITE = "import sys; open(sys.argv[1], 'w', encoding='utf-8').write(sys.argv[2])"

    def __init__(self, name: str, title: str, path: str, venv: str, record: dict[str, Any], **unused):
        super().__init__(name, title)
        self.path, self.venv, self.text = path, venv, json.dumps(record, indent=2, sort_keys=True) + "\n"

    async def check(self, ctx: StepContext) -> bool:
        return await ctx.runner.read_text(self.path) == self.text

    async def do(self, ctx: StepContext) -> None:
        result = await ctx.runner.run([venv_python(self.venv), "-c", self.WRITE, self.path, self.text])
        if not result.ok:
            raise self.fail(_("could not write {path}").format(path=self.path), result)


STEP_KINDS: dict[str, type[Step]] = {
    "run_package": RunPackageStep,
    "reboot": RebootStep,
    "venv": VenvStep,
    "pip_install": PipInstallStep,
    "pip_uninstall": PipUninstallStep,
    "pip_check": PipCheckStep,
    "verify_npu": VerifyNpuStep,
    "verify_vllm": VerifyVllmStep,
    "record_stack": RecordStackStep,
}


def build_step(spec: StepSpec) -> Step:
    try:
        cls = STEP_KINDS[spec.kind]
    except KeyError:
        raise ValueError(f"unknown step kind {spec.kind!r}; known: {', '.join(STEP_KINDS)}") from None
    return cls(spec.name, spec.title, **spec.params)
