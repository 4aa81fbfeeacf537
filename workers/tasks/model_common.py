"""What the model tasks (workers.tasks.models) and the external tools' (workers.tasks.model_tools) share:
the error they raise, the operation frame they run in, a folder's size and description, and running a
command with its lines in the operation's log. Below both, so neither imports the other to get them."""

from __future__ import annotations

import inspect
import shlex
from pathlib import Path

from workers import host_locks
from workers.hosts import LocalRunner
from workers.i18n import gettext_noop as _
from workers.models.inspect import NotAModelError, inspect_model
from workers.models.onnx_file import onnx_facts
from workers.tasks.operation import run_operation


class ModelTaskError(Exception):
    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


def operation_task(body, exclusive: str = ""):
    """Turn body(emitter, config, **kwargs) into a task that runs in the operation frame; with `exclusive`,
    holding the host's lock of that kind (workers.host_locks)."""

    takes_root = "models_root" in inspect.signature(body).parameters

    def task(operation_id: str, start_seq: int = 0, target: dict | None = None, **kwargs) -> None:
        # The models root is this host's policy (ASCEND_PANEL_MODELS_ROOT), never what a message says.
        kwargs.pop("models_root", None)

        def run(emitter, config):
            if target is not None:  # routed to the central agent for an SSH node
                raise ModelTaskError(
                    "model operations need an agent on the node", _("Install the agent on this node first.")
                )
            if takes_root:
                kwargs["models_root"] = config.models_root
            return body(emitter, config, **kwargs)

        run_operation(
            operation_id, start_seq, host_locks.exclusive(exclusive, operation_id, run) if exclusive else run
        )

    task.__name__ = body.__name__
    return task


def folder_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def describe_folder(path: Path) -> dict:
    """Facts, format and size of a model folder (or an ONNX file / folder of ONNX files)."""
    onnx = [path] if path.suffix == ".onnx" and path.is_file() else []
    if path.is_dir() and not (path / "config.json").is_file():
        onnx = sorted(path.glob("*.onnx"))
        if not onnx and sorted(path.glob("*.om")):
            return {"format": "om", "facts": {"om_files": [p.name for p in path.glob("*.om")]}}
    if onnx:
        return {"format": "onnx", "facts": {"onnx_files": [p.name for p in onnx], **onnx_facts(onnx[0])}}
    try:
        facts = inspect_model(path)
    except NotAModelError as error:
        raise ModelTaskError(
            str(error), _("Give the folder that holds config.json and the *.safetensors weights.")
        ) from error
    quantized = str(facts.get("quantization") or "").upper()
    return {"format": "w8a8_dynamic" if quantized == "W8A8_DYNAMIC" else "hf", "facts": facts}


def run_logged(
    emitter, argv: list[str], timeout: float, on_line=None, shown: list[str] | None = None
) -> tuple[bool, list[str]]:
    """Run argv, logging its lines; the log's first line is the command (`shown` when argv wraps it, e.g.
    in a bash that sources set_env.sh first), shell-quoted so it can be copied into a terminal."""
    lines: list[str] = []

    def log_line(stream: str, line: str) -> None:
        lines.append(line)
        if on_line is not None and on_line(line):
            return  # on_line made something better of it than a log line (e.g. a progress event)
        emitter.log(line, stream=stream)

    emitter.log("$ " + shlex.join(shown or argv))
    result = LocalRunner().run_sync(argv, timeout=timeout, on_line=log_line)
    return result.ok, lines
