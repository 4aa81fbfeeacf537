"""Agent tasks for models: inspect, download, convert (dtype, W8A8_DYNAMIC), copy, delete; msModelSlim and
ATC, the external tools, are in workers.tasks.model_tools.

Paths in the kwargs are node paths (see workers.models.node_paths); anything written or deleted must lie
inside the agent's own models root (ASCEND_PANEL_MODELS_ROOT on the host); the `models_root` a message
carries is ignored, so a message cannot widen what the agent may delete.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from workers import host_locks
from workers.i18n import gettext_noop as _
from workers.models.commands import (
    CommandInputError,
    explain_rsync_failure,
    parse_rsync_progress,
    rsync_argv,
)
from workers.models.download import DownloadError, download_files
from workers.models.host_keys import HostKeyError, pinned_known_hosts
from workers.models.hub import HubError, HubRepo, hub_facts, list_files
from workers.models.model_folder import BadSourceError
from workers.models.node_paths import checked_model_dir, staging_dir
from workers.models.target_disk import TargetDiskError, ensure_room
from workers.task_names import (
    AGENT_CONVERT_MODEL,
    AGENT_COPY_MODEL,
    AGENT_DELETE_MODEL,
    AGENT_DOWNLOAD_MODEL,
    AGENT_INSPECT_MODEL,
)
from workers.tasks.base import agent_task
from workers.tasks.model_common import (
    ModelTaskError,
    describe_folder,
    folder_size,
    human_bytes,
    operation_task,
)
from workers.tasks.model_tools import msmodelslim_convert, run_logged

# A round-to-nearest int8 code is off by at most half a step (0.5 / 127 of the row's largest weight);
# anything above that means the quantizer misbehaved, not that the weights are hard to quantize.
W8A8_ERROR_BOUND = 0.5 / 127 * 1.001
COPY_TIMEOUT_S = 24 * 3600


def hub_unreachable(error: Exception) -> ModelTaskError:
    """A hub that did not list a model (down, unreachable, no such repository): what it said, what to do."""
    return ModelTaskError(
        f"The hub could not list the model: {error}",
        _(
            "Check the repository id and revision, and that this node reaches the hub "
            "(a mirror is set with PANEL_MODELSCOPE_ENDPOINT / PANEL_HF_ENDPOINT)."
        ),
    )


def inspect_body(emitter, config, path: str = "", hub: dict | None = None, models_root: str = "") -> dict:
    if hub:
        repo = HubRepo.of(**hub)
        emitter.progress(
            10, _("Reading {repo} from {endpoint}").format(repo=repo.repo_id, endpoint=repo.endpoint)
        )
        try:
            facts = hub_facts(repo)
        except HubError as error:
            raise hub_unreachable(error) from error
        emitter.log(f"{facts['files']} files, {human_bytes(facts['download_bytes'])} to download")
        emitter.progress(100, _("Inspected"))
        return {"facts": facts, "hub": hub}
    local = checked_model_dir(config.host_root, path, models_root)  # it is read as root: no /etc
    emitter.progress(10, _("Inspecting {path}").format(path=path))
    if not local.exists():
        raise ModelTaskError(f"{path} does not exist on {config.node_name}", _("Check the path on the node."))
    described = describe_folder(local)
    size = folder_size(local)
    emitter.log(f"{path}: {described['format']}, {human_bytes(size)}")
    emitter.progress(100, _("Inspected"))
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
    try:
        return _download(emitter, config, source, repo_id, path, models_root, revision, endpoint)
    except HubError as error:
        raise hub_unreachable(error) from error
    except DownloadError as error:
        raise ModelTaskError(
            f"The download stopped: {error}",
            _(
                "Start the download again: files already complete are checked and kept. If it stops the "
                "same way, check the node's free disk space and its connection to the hub."
            ),
        ) from error


def _download(emitter, config, source, repo_id, path, models_root, revision, endpoint) -> dict:
    destination = checked_model_dir(config.host_root, path, models_root)
    repo = HubRepo.of(source, repo_id, revision, endpoint)
    emitter.progress(
        0,
        _("Listing {repo}@{revision} on {endpoint}").format(
            repo=repo.repo_id, revision=repo.revision, endpoint=repo.endpoint
        ),
    )
    files = list_files(repo)
    total = sum(f.size for f in files)
    emitter.log(f"{len(files)} files, {human_bytes(total)} from {repo.endpoint}")

    def on_progress(progress):
        payload = progress.as_payload()  # the time left travels as eta_s; pages show it in its own column
        stage = _("Downloading {file}: {done} of {total} at {rate}/s").format(
            file=progress.file,
            done=human_bytes(progress.done_bytes),
            total=human_bytes(total),
            rate=human_bytes(progress.rate_bps),
        )
        emitter.progress(progress.percent * 0.97, stage, **payload)

    report = download_files(files, destination, source=source, on_progress=on_progress)
    emitter.log(
        f"{report['files']} files verified by size, {report['sha256_verified']} by sha256"
        + (" (already present)" if report["already_present"] else "")
    )
    emitter.progress(98, _("Verifying the download"))
    described = describe_folder(destination)
    emitter.progress(100, _("Downloaded"))
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
    source = checked_model_dir(config.host_root, source_path, models_root)
    destination = checked_model_dir(config.host_root, path, models_root)
    if backend == "msmodelslim":
        return msmodelslim_convert(emitter, source, destination, path, device, model_type)
    if target_format == "w8a8_dynamic":
        return _quantize(emitter, source, destination, path)
    return _convert_dtype(emitter, source, destination, path, target_format)


def _quantize(emitter, source: Path, destination: Path, path: str) -> dict:
    from workers.models.quantize import quantize_w8a8_dynamic  # numpy: only the task that needs it loads it

    emitter.progress(0, _("Quantizing to W8A8_DYNAMIC"))
    try:
        report = quantize_w8a8_dynamic(
            source,
            destination,
            on_progress=lambda pct, stage: emitter.progress(
                pct * 0.95, _("Quantizing {what}").format(what=stage)
            ),
        )
    except BadSourceError as error:
        raise ModelTaskError(str(error), _("Quantize the original BF16/FP16 Hugging Face folder.")) from error
    emitter.progress(96, _("Verifying the quantized model"))
    errors = report.pop("relative_error_by_tensor")
    worst = sorted(errors.items(), key=lambda item: -item[1])[:5]
    for name, relative_error in worst:
        emitter.log(f"max relative dequantization error {relative_error:.5f} in {name}")
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
    emitter.progress(100, _("Quantized and verified"))
    size = folder_size(destination)
    return {"path": path, "size_bytes": size, "report": report, "verification": verification, **described}


def _convert_dtype(emitter, source: Path, destination: Path, path: str, dtype: str) -> dict:
    from workers.models.convert import convert_dtype  # numpy: only the task that needs it loads it

    emitter.progress(5, _("Converting to {dtype}").format(dtype=dtype))
    try:
        report = convert_dtype(source, destination, dtype)
    except BadSourceError as error:
        raise ModelTaskError(str(error), _("Convert a Hugging Face folder with float32 weights.")) from error
    emitter.log(f"{report['tensors_converted']} tensors converted to {dtype}")
    emitter.progress(95, _("Verifying the converted model"))
    described = describe_folder(destination)
    if described["facts"].get("dtype") != dtype:
        raise ModelTaskError(f"verification failed: the output says dtype {described['facts'].get('dtype')}")
    emitter.progress(100, _("Converted and verified"))
    verification = {"passed": True, "dtype": dtype}
    return {
        "path": path,
        "size_bytes": folder_size(destination),
        "report": report,
        "verification": verification,
        **described,
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
    models_root: str = "",
) -> dict:
    """rsync path to the target node over SSH as this agent's user (config.ssh_key or ~/.ssh keys), once
    the target has said it has room for it.

    target_host_key is the fingerprint the panel confirmed for the target; without one, the agent user's
    known_hosts must already know the target."""
    source = checked_model_dir(config.host_root, path, models_root)  # nothing outside the roots leaves
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
            stage = _("Copying to {host}: {percent}% at {rate}, {eta} left").format(
                host=target_host, percent=percent, rate=rate, eta=eta
            )
            emitter.progress(percent, stage, bytes_done=done)
        return True

    with tempfile.TemporaryDirectory(prefix="ascend-panel-copy-") as scratch:
        known_hosts = ""
        if target_host_key:
            emitter.progress(0, _("Checking the SSH host key of {host}").format(host=target_host))
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
                bwlimit_kib_s=config.copy_bwlimit_kib_s,
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
        emitter.progress(
            0, _("Copying {path} to {target}").format(path=path, target=f"{target_host}:{target_path}")
        )
        ok, lines = run_logged(emitter, argv, COPY_TIMEOUT_S, on_progress)
    if not ok:
        reason, hint = explain_rsync_failure(lines)
        login = f"{target_user}@{target_host}" if target_user else target_host
        raise ModelTaskError(f"rsync to {login}:{target_port} failed: {reason}", hint)
    emitter.progress(100, _("Copied"))
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
    emitter.progress(100, _("Deleted"))
    return {"path": path, "removed": removed}


inspect_model = agent_task(AGENT_INSPECT_MODEL)(operation_task(inspect_body))
download_model = agent_task(AGENT_DOWNLOAD_MODEL)(operation_task(download_body))
convert_model = agent_task(AGENT_CONVERT_MODEL)(operation_task(convert_body, host_locks.CONVERSION))
copy_model = agent_task(AGENT_COPY_MODEL)(operation_task(copy_body, host_locks.COPY))
delete_model = agent_task(AGENT_DELETE_MODEL)(operation_task(delete_body))
