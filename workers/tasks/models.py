"""Agent tasks for models: inspect, download, convert (dtype, W8A8_DYNAMIC, msModelSlim), ATC, copy, delete.

Paths in the kwargs are node paths (see workers.models.node_paths); anything written or deleted must lie
inside the agent's own models root (ASCEND_PANEL_MODELS_ROOT on the host); the `models_root` a message
carries is ignored, so a message cannot widen what the agent may delete.
"""

from __future__ import annotations

import inspect
import shutil
import tempfile
from pathlib import Path

from workers.i18n import gettext_noop as _
from workers.models.node_paths import checked_model_dir, host_path, staging_dir
from workers.task_names import (
    AGENT_ATC_MODEL,
    AGENT_CONVERT_MODEL,
    AGENT_COPY_MODEL,
    AGENT_DELETE_MODEL,
    AGENT_DOWNLOAD_MODEL,
    AGENT_INSPECT_MODEL,
)
from workers.tasks.base import agent_task
from workers.tasks.operation import run_operation

# A round-to-nearest int8 code is off by at most half a step (0.5 / 127 of the row's largest weight);
# anything above that means the quantizer misbehaved, not that the weights are hard to quantize.
W8A8_ERROR_BOUND = 0.5 / 127 * 1.001
ATC_TIMEOUT_S = 3 * 3600
MSMODELSLIM_TIMEOUT_S = 12 * 3600
COPY_TIMEOUT_S = 24 * 3600


class ModelTaskError(Exception):
    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


def _operation(body):
    """Turn body(emitter, config, **kwargs) into a task that runs in the operation frame."""

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

        run_operation(operation_id, start_seq, run)

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
    from workers.models.inspect import NotAModelError, inspect_model

    onnx = [path] if path.suffix == ".onnx" and path.is_file() else []
    if path.is_dir() and not (path / "config.json").is_file():
        onnx = sorted(path.glob("*.onnx"))
        if not onnx and sorted(path.glob("*.om")):
            return {"format": "om", "facts": {"om_files": [p.name for p in path.glob("*.om")]}}
    if onnx:
        return {"format": "onnx", "facts": {"onnx_files": [p.name for p in onnx]}}
    try:
        facts = inspect_model(path)
    except NotAModelError as error:
        raise ModelTaskError(
            str(error), _("Give the folder that holds config.json and the *.safetensors weights.")
        ) from error
    quantized = str(facts.get("quantization") or "").upper()
    return {"format": "w8a8_dynamic" if quantized == "W8A8_DYNAMIC" else "hf", "facts": facts}


def inspect_body(emitter, config, path: str = "", hub: dict | None = None) -> dict:
    if hub:
        from workers.models.hub import HubRepo, hub_facts

        repo = HubRepo.of(**hub)
        emitter.progress(10, f"Reading {repo.repo_id} from {repo.endpoint}")
        facts = hub_facts(repo)
        emitter.log(f"{facts['files']} files, {human_bytes(facts['download_bytes'])} to download")
        emitter.progress(100, "Inspected")
        return {"facts": facts, "hub": hub}
    local = host_path(config.host_root, path)
    emitter.progress(10, f"Inspecting {path}")
    if not local.exists():
        raise ModelTaskError(f"{path} does not exist on {config.node_name}", _("Check the path on the node."))
    described = describe_folder(local)
    size = folder_size(local)
    emitter.log(f"{path}: {described['format']}, {human_bytes(size)}")
    emitter.progress(100, "Inspected")
    return {"path": path, "size_bytes": size, **described}


def download_body(
    emitter,
    config,
    *,
    source: str,
    repo_id: str,
    path: str,
    models_root: str,
    revision: str = "",
    endpoint: str = "",
) -> dict:
    from workers.models.download import download_files
    from workers.models.hub import HubRepo, list_files

    destination = checked_model_dir(config.host_root, path, models_root)
    repo = HubRepo.of(source, repo_id, revision, endpoint)
    emitter.progress(0, f"Listing {repo.repo_id}@{repo.revision} on {repo.endpoint}")
    files = list_files(repo)
    total = sum(f.size for f in files)
    emitter.log(f"{len(files)} files, {human_bytes(total)} from {repo.endpoint}")

    def on_progress(progress):
        payload = progress.as_payload()
        eta = f", {payload['eta_s']} s left" if payload["eta_s"] is not None else ""
        stage = (
            f"Downloading {progress.file}: {human_bytes(progress.done_bytes)} of {human_bytes(total)} "
            f"at {human_bytes(progress.rate_bps)}/s{eta}"
        )
        emitter.progress(progress.percent * 0.97, stage, **payload)

    report = download_files(files, destination, source=source, on_progress=on_progress)
    emitter.log(
        f"{report['files']} files verified by size, {report['sha256_verified']} by sha256"
        + (" (already present)" if report["already_present"] else "")
    )
    emitter.progress(98, "Verifying the download")
    described = describe_folder(destination)
    emitter.progress(100, "Downloaded")
    return {"path": path, "size_bytes": folder_size(destination), "download": report, **described}


def convert_body(
    emitter,
    config,
    *,
    source_path: str,
    path: str,
    models_root: str,
    target_format: str,
    backend: str = "builtin",
    device: str = "npu",
    model_type: str = "",
) -> dict:
    source = host_path(config.host_root, source_path)
    destination = checked_model_dir(config.host_root, path, models_root)
    if backend == "msmodelslim":
        return _msmodelslim(emitter, source, destination, path, device, model_type)
    if target_format == "w8a8_dynamic":
        return _quantize(emitter, source, destination, path)
    return _convert_dtype(emitter, source, destination, path, target_format)


def _quantize(emitter, source: Path, destination: Path, path: str) -> dict:
    from workers.models.model_folder import BadSourceError
    from workers.models.quantize import quantize_w8a8_dynamic

    emitter.progress(0, "Quantizing to W8A8_DYNAMIC")
    try:
        report = quantize_w8a8_dynamic(
            source,
            destination,
            on_progress=lambda pct, stage: emitter.progress(pct * 0.95, f"Quantizing {stage}"),
        )
    except BadSourceError as error:
        raise ModelTaskError(str(error), _("Quantize the original BF16/FP16 Hugging Face folder.")) from error
    emitter.progress(96, "Verifying the quantized model")
    errors = report.pop("relative_error_by_tensor")
    worst = sorted(errors.items(), key=lambda item: -item[1])[:5]
    for name, error in worst:
        emitter.log(f"max relative dequantization error {error:.5f} in {name}")
    described = describe_folder(destination)
    problems = []
    if described["facts"].get("quantization") != "W8A8_DYNAMIC":
        problems.append("the output does not describe itself as W8A8_DYNAMIC")
    if report["tensors_quantized"] == 0:
        problems.append("no linear layer was quantized")
    if report["max_relative_error"] > W8A8_ERROR_BOUND:
        problems.append(
            f"max relative error {report['max_relative_error']:.5f} exceeds {W8A8_ERROR_BOUND:.5f}"
        )
    verification = {
        "passed": not problems,
        "problems": problems,
        "max_relative_error": report["max_relative_error"],
        "bound": W8A8_ERROR_BOUND,
        "relative_error_by_tensor": errors,
    }
    if problems:
        shutil.rmtree(destination, ignore_errors=True)
        raise ModelTaskError(
            "verification failed: " + "; ".join(problems), _("Report this model to the team.")
        )
    emitter.progress(100, "Quantized and verified")
    size = folder_size(destination)
    return {"path": path, "size_bytes": size, "report": report, "verification": verification, **described}


def _convert_dtype(emitter, source: Path, destination: Path, path: str, dtype: str) -> dict:
    from workers.models.convert import convert_dtype
    from workers.models.model_folder import BadSourceError

    emitter.progress(5, f"Converting to {dtype}")
    try:
        report = convert_dtype(source, destination, dtype)
    except BadSourceError as error:
        raise ModelTaskError(str(error), _("Convert a Hugging Face folder with float32 weights.")) from error
    emitter.log(f"{report['tensors_converted']} tensors converted to {dtype}")
    emitter.progress(95, "Verifying the converted model")
    described = describe_folder(destination)
    if described["facts"].get("dtype") != dtype:
        raise ModelTaskError(f"verification failed: the output says dtype {described['facts'].get('dtype')}")
    emitter.progress(100, "Converted and verified")
    verification = {"passed": True, "dtype": dtype}
    return {
        "path": path,
        "size_bytes": folder_size(destination),
        "report": report,
        "verification": verification,
        **described,
    }


def _run_logged(emitter, argv: list[str], timeout: float, on_line=None) -> tuple[bool, list[str]]:
    from workers.hosts import LocalRunner

    lines: list[str] = []

    def log_line(stream: str, line: str) -> None:
        lines.append(line)
        if on_line is not None and on_line(line):
            return  # on_line made something better of it than a log line (e.g. a progress event)
        emitter.log(line, stream=stream)

    emitter.log("$ " + " ".join(argv))
    result = LocalRunner().run_sync(argv, timeout=timeout, on_line=log_line)
    return result.ok, lines


def _msmodelslim(emitter, source: Path, destination: Path, path: str, device: str, model_type: str) -> dict:
    from workers.models.commands import CommandInputError, msmodelslim_argv

    if shutil.which("msmodelslim") is None:
        raise ModelTaskError(
            "msmodelslim is not installed on this node",
            _("Install msModelSlim (pip install from the msit repository) or use the built-in quantizer."),
        )
    staging = staging_dir(destination)
    try:
        argv = msmodelslim_argv(str(source), str(staging), "w8a8", device, model_type)
    except CommandInputError as error:
        raise ModelTaskError(
            str(error), _("Give msModelSlim's model type, e.g. Qwen2.5-7B-Instruct.")
        ) from error
    shutil.rmtree(staging, ignore_errors=True)
    emitter.progress(5, "Quantizing with msModelSlim")
    ok, lines = _run_logged(emitter, argv, MSMODELSLIM_TIMEOUT_S)
    if not ok:
        shutil.rmtree(staging, ignore_errors=True)
        hint = _diagnosed_hint(lines) or _(
            "msModelSlim failed: check that the source is the original BF16/FP16 Hugging Face folder, that "
            "the model type names one msModelSlim supports, and with --device npu that torch-npu sees the "
            "NPUs; the log above has msModelSlim's own error."
        )
        raise ModelTaskError("msmodelslim failed; see the log", hint)
    emitter.progress(95, "Verifying the quantized model")
    described = describe_folder(staging)
    if not str(described["facts"].get("quantization") or "").upper().startswith("W8A8"):
        raise ModelTaskError("verification failed: msmodelslim wrote no W8A8 model description")
    staging.rename(destination)
    emitter.progress(100, "Quantized and verified")
    return {
        "path": path,
        "size_bytes": folder_size(destination),
        "verification": {"passed": True},
        **described,
    }


def _diagnosed_hint(lines: list[str]) -> str:
    from workers.ascend.diagnose import diagnose_lines

    findings = diagnose_lines(lines)
    if findings:
        return f"{findings[0]['title']}: {findings[0]['hint']}"
    return ""


def atc_body(
    emitter,
    config,
    *,
    onnx_path: str,
    path: str,
    models_root: str,
    soc_version: str,
    input_shape: str = "",
    input_format: str = "NCHW",
) -> dict:
    from workers.engine.command import source_then_exec
    from workers.models.commands import atc_argv

    source = host_path(config.host_root, onnx_path)
    destination = checked_model_dir(config.host_root, path, models_root)
    if not source.is_file():
        raise ModelTaskError(
            f"{onnx_path} is not a file on {config.node_name}", _("Check the ONNX file's path.")
        )
    staging = staging_dir(destination)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    argv = atc_argv(str(source), str(staging / "model"), soc_version, input_shape, input_format)
    set_env = Path(config.ascend_root) / "ascend-toolkit" / "set_env.sh"
    if set_env.is_file():
        argv = source_then_exec([str(set_env)], argv)
    elif shutil.which("atc") is None:
        raise ModelTaskError(
            "atc is not installed on this node",
            _("Install the CANN toolkit, which provides atc, then retry."),
        )
    emitter.progress(5, f"Converting {Path(onnx_path).name} for {soc_version}")
    ok, lines = _run_logged(emitter, argv, ATC_TIMEOUT_S)
    om_file = staging / "model.om"
    if not ok or not om_file.is_file():
        shutil.rmtree(staging, ignore_errors=True)
        hint = _diagnosed_hint(lines) or _(
            "ATC failed: check --input_shape names and sizes against the ONNX inputs and that soc_version "
            "matches this node's NPUs (npu-smi info)."
        )
        raise ModelTaskError("atc did not produce model.om; see the log", hint)
    staging.rename(destination)
    emitter.progress(100, "Converted")
    return {
        "path": path,
        "format": "om",
        "size_bytes": folder_size(destination),
        "facts": {"om_files": ["model.om"], "soc_version": soc_version, "input_shape": input_shape},
    }


def copy_body(
    emitter,
    config,
    *,
    path: str,
    target_host: str,
    target_path: str,
    target_user: str = "",
    target_port: int = 22,
    target_host_key: str = "",
    target_name: str = "",
) -> dict:
    """rsync path to the target node over SSH as this agent's user (config.ssh_key or ~/.ssh keys), once
    the target has said it has room for it.

    target_host_key is the fingerprint the panel confirmed for the target; without one, the agent user's
    known_hosts must already know the target."""
    from workers.models.commands import (
        CommandInputError,
        explain_rsync_failure,
        parse_rsync_progress,
        rsync_argv,
    )
    from workers.models.host_keys import HostKeyError, pinned_known_hosts
    from workers.models.target_disk import TargetDiskError, ensure_room

    source = host_path(config.host_root, path)
    if not source.is_dir():
        raise ModelTaskError(f"{path} is not a folder on {config.node_name}")
    size = folder_size(source)
    shown = {"percent": -1}

    def on_progress(line: str) -> bool:
        if not line.strip():
            return True  # what precedes the \r that starts rsync's first progress redraw
        parsed = parse_rsync_progress(line)
        if parsed is None:
            return False
        done, percent, rate, eta = parsed
        if percent != shown["percent"]:  # rsync redraws about once a second; the log needs each percent once
            shown["percent"] = percent
            emitter.progress(
                percent, f"Copying to {target_host}: {percent}% at {rate}, {eta} left", bytes_done=done
            )
        return True

    with tempfile.TemporaryDirectory(prefix="ascend-panel-copy-") as scratch:
        known_hosts = ""
        if target_host_key:
            emitter.progress(0, f"Checking the SSH host key of {target_host}")
            try:
                known_hosts = str(
                    pinned_known_hosts(target_host, target_port, target_host_key, Path(scratch))
                )
            except (HostKeyError, ValueError) as error:
                raise ModelTaskError(str(error), getattr(error, "hint", "")) from error
            emitter.log(f"{target_host}:{target_port} presents the confirmed host key {target_host_key}")
        try:
            argv = rsync_argv(
                str(source),
                target_user,
                target_host,
                target_path,
                target_port,
                known_hosts_file=known_hosts,
                identity_file=config.ssh_key,
            )
        except CommandInputError as error:
            raise ModelTaskError(
                str(error), _("Check ASCEND_PANEL_SSH_KEY in the agent's settings.")
            ) from error
        try:
            ensure_room(
                emitter,
                size,
                target_path,
                target_name or target_host,
                user=target_user,
                host=target_host,
                port=target_port,
                known_hosts_file=known_hosts,
                identity_file=config.ssh_key,
            )
        except TargetDiskError as error:
            raise ModelTaskError(str(error), error.hint) from error
        emitter.progress(0, f"Copying {path} to {target_host}:{target_path}")
        ok, lines = _run_logged(emitter, argv, COPY_TIMEOUT_S, on_progress)
    if not ok:
        reason, hint = explain_rsync_failure(lines)
        login = f"{target_user}@{target_host}" if target_user else target_host
        raise ModelTaskError(f"rsync to {login}:{target_port} failed: {reason}", hint)
    emitter.progress(100, "Copied")
    return {"path": target_path, "size_bytes": size}


def delete_body(emitter, config, *, path: str, models_root: str) -> dict:
    folder = checked_model_dir(config.host_root, path, models_root)
    removed = []
    for candidate in (
        folder,
        folder.with_name(folder.name + ".partial"),
        staging_dir(folder),
    ):
        if candidate.is_dir() and not candidate.is_symlink():
            shutil.rmtree(candidate)
            removed.append(candidate.name)
        elif candidate.exists() or candidate.is_symlink():
            candidate.unlink()
            removed.append(candidate.name)
    emitter.log(f"removed {', '.join(removed)}" if removed else f"{path} was already gone")
    emitter.progress(100, "Deleted")
    return {"path": path, "removed": removed}


inspect_model = agent_task(AGENT_INSPECT_MODEL)(_operation(inspect_body))
download_model = agent_task(AGENT_DOWNLOAD_MODEL)(_operation(download_body))
convert_model = agent_task(AGENT_CONVERT_MODEL)(_operation(convert_body))
atc_model = agent_task(AGENT_ATC_MODEL)(_operation(atc_body))
copy_model = agent_task(AGENT_COPY_MODEL)(_operation(copy_body))
delete_model = agent_task(AGENT_DELETE_MODEL)(_operation(delete_body))
