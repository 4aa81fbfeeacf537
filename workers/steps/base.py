"""Idempotent steps: check (already satisfied?) -> do -> verify.

A plan is a list of StepSpec (plain data the panel can store and show); build_step (steps.install) turns
each into a Step; run_steps runs them in order, skipping the ones whose check says they are already done,
so a plan can be re-run after a failure or a reboot and only the missing work happens.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workers.i18n import gettext_noop as _

if TYPE_CHECKING:
    from workers.hosts.base import CommandResult, Runner

Emit = Callable[[str, dict[str, Any]], None]
"""emit(kind, payload): kind is "log" ({step, stream, line}), "state" ({step, state, ...}) or "progress"."""

# Step states reported through emit("state", ...).
CHECKING = "checking"
SKIPPED = "skipped"
RUNNING = "running"
VERIFYING = "verifying"
DONE = "done"
FAILED = "failed"


class StepFailed(Exception):
    """A step could not do its job; the message says what failed and how to fix it."""

    def __init__(self, step: str, message: str, hint: str | None = None, output_tail: str = ""):
        self.step = step
        self.hint = hint
        self.output_tail = output_tail
        # A template the panel knows: it shows "step …: …" in the reader's language, message included.
        super().__init__(_("step {step}: {message}").format(step=step, message=message))


class RebootRequired(StepFailed):
    """The host must reboot before the plan can go on; re-running the plan afterwards resumes it."""


@dataclass(frozen=True)
class StepSpec:
    """One planned step as data: `kind` picks the Step class, `params` are its arguments (JSON-able)."""

    name: str
    title: str
    kind: str
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "kind": self.kind, "params": dict(self.params)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepSpec:
        """A stored plan's step: what the panel kept may carry more beside it (its title's `texts`)."""
        return cls(
            name=data["name"], title=data["title"], kind=data["kind"], params=dict(data.get("params") or {})
        )


@dataclass
class PipSource:
    """Where pip finds packages: an index (plus extra indexes) or an offline wheelhouse directory."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    wheelhouse: str | None = None

    def pip_args(self) -> list[str]:
        if self.wheelhouse:
            return ["--no-index", "--find-links", self.wheelhouse]
        args = ["--index-url", self.index_url] if self.index_url else []
        for url in self.extra_index_urls:
            args += ["--extra-index-url", url]
        return args

    def to_dict(self) -> dict[str, Any]:
        return {
            "index_url": self.index_url,
            "extra_index_urls": list(self.extra_index_urls),
            "wheelhouse": self.wheelhouse,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> PipSource:
        data = data or {}
        return cls(data.get("index_url"), tuple(data.get("extra_index_urls") or ()), data.get("wheelhouse"))


@dataclass
class StepContext:
    """What every step gets: the host, where to report, and the paths the plan works with."""

    runner: Runner
    emit: Emit
    ascend_root: str = "/usr/local/Ascend"
    packages_dir: str = "/var/lib/ascend-panel/packages"
    work_dir: str = "/var/lib/ascend-panel"
    venv: str | None = None
    pip: PipSource = field(default_factory=PipSource)
    cancel: asyncio.Event | None = None
    # Facts steps hand to later steps (e.g. "reboot_required"); lives only as long as one run.
    state: dict[str, Any] = field(default_factory=dict)


class Step(ABC):
    """check() says whether the work is already done; do() does it; verify() proves it worked."""

    def __init__(self, name: str, title: str):
        self.name = name
        self.title = title

    @abstractmethod
    async def check(self, ctx: StepContext) -> bool: ...

    @abstractmethod
    async def do(self, ctx: StepContext) -> None: ...

    async def verify(self, ctx: StepContext) -> None:
        """By default a step is proven done when its check now passes."""
        if not await self.check(ctx):
            raise StepFailed(self.name, _("finished, but its result is not there (check still fails)"))

    async def run_command(
        self, ctx: StepContext, argv: list[str], *, timeout: float | None = None, env: dict | None = None
    ) -> CommandResult:
        """Run argv on the host, streaming every line to the log with this step's name."""

        def on_line(stream: str, line: str) -> None:
            ctx.emit("log", {"step": self.name, "stream": stream, "line": line})

        return await ctx.runner.run(argv, env=env, timeout=timeout, on_line=on_line, cancel=ctx.cancel)

    def fail(self, message: str, result: CommandResult | None = None, hint: str | None = None) -> StepFailed:
        tail = ""
        if result is not None:
            text = result.stderr if result.stderr.strip() else result.stdout
            tail = "\n".join(text.rstrip("\n").splitlines()[-10:])
        return StepFailed(self.name, message, hint=hint, output_tail=tail)


async def run_step(step: Step, ctx: StepContext) -> str:
    """Run one step idempotently; returns SKIPPED or DONE, raises StepFailed."""
    ctx.emit("state", {"step": step.name, "title": step.title, "state": CHECKING})
    if await step.check(ctx):
        ctx.emit("state", {"step": step.name, "title": step.title, "state": SKIPPED})
        return SKIPPED
    ctx.emit("state", {"step": step.name, "title": step.title, "state": RUNNING})
    try:
        await step.do(ctx)
        ctx.emit("state", {"step": step.name, "title": step.title, "state": VERIFYING})
        await step.verify(ctx)
    except StepFailed as error:
        ctx.emit(
            "state",
            {
                "step": step.name,
                "title": step.title,
                "state": FAILED,
                "error": str(error),
                "hint": error.hint,
            },
        )
        raise
    ctx.emit("state", {"step": step.name, "title": step.title, "state": DONE})
    return DONE


async def run_steps(steps: Iterable[Step], ctx: StepContext) -> dict[str, str]:
    """Run steps in order, reporting progress; stops at the first failure (StepFailed propagates)."""
    steps = list(steps)
    outcome: dict[str, str] = {}
    for index, step in enumerate(steps):
        ctx.emit("progress", {"step": step.name, "index": index, "total": len(steps)})
        outcome[step.name] = await run_step(step, ctx)
    ctx.emit("progress", {"step": None, "index": len(steps), "total": len(steps)})
    return outcome
