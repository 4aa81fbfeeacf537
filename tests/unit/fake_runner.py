"""A tiny stand-in for workers.hosts' Runner, for unit tests of code that reads a host through one.

It answers `run(argv)` from a table of argv -> output and `read_text(path)` from a table of path -> text.
With `real_commands=True` an argv missing from the table runs for real (no shell), and with
`real_files=True` a path missing from the table is read from disk: that lets a test point host_root
at a directory tree it built and get the same answers a real host would give.
"""

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class FakeResult:
    argv: list[str]
    exit_status: int = 0
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    timed_out: bool = False
    cancelled: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_status == 0 and not self.timed_out and not self.cancelled


@dataclass
class FakeRunner:
    commands: dict[tuple[str, ...], str | FakeResult] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    real_commands: bool = False
    real_files: bool = False
    calls: list[list[str]] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)

    async def run(
        self, argv, *, env=None, cwd=None, timeout=None, on_line=None, cancel=None, stdin=None, check=False
    ):
        self.calls.append(list(argv))
        answer = self.commands.get(tuple(argv))
        if isinstance(answer, FakeResult):
            return answer
        if answer is not None:
            return FakeResult(argv=list(argv), stdout=answer)
        if self.real_commands:
            return self._run_for_real(list(argv))
        # What `env` prints when a program is missing, so callers see the real failure shape.
        return FakeResult(argv=list(argv), exit_status=127, stderr=f"{argv[0]}: command not found")

    async def read_text(self, path):
        self.reads.append(path)
        if path in self.files:
            return self.files[path]
        if self.real_files:
            try:
                return Path(path).read_text(encoding="utf-8", errors="replace")
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                return None
        return None

    @staticmethod
    def _run_for_real(argv: list[str]) -> FakeResult:
        started = time.monotonic()
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
        return FakeResult(
            argv=argv,
            exit_status=done.returncode,
            stdout=done.stdout,
            stderr=done.stderr,
            duration_s=time.monotonic() - started,
        )
