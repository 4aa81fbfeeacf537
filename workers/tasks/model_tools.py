"""Agent work that runs the external model tools: msModelSlim (quantization, called by convert) and ATC
(ONNX → .om, its own task). Each streams the tool's output into the operation's log as it comes."""

from __future__ import annotations

import shutil
from pathlib import Path

from workers import host_locks
from workers.ascend.diagnose import diagnose_lines
from workers.engine.launch.command import source_then_exec
from workers.i18n import gettext_noop as _
from workers.models.commands import CommandInputError, atc_argv, msmodelslim_argv
from workers.models.node_paths import checked_model_dir, staging_dir
from workers.task_names import AGENT_ATC_MODEL
from workers.tasks.base import agent_task
from workers.tasks.model_common import (
    ModelTaskError,
    describe_folder,
    folder_size,
    operation_task,
    run_logged,
)

ATC_TIMEOUT_S = 3 * 3600
MSMODELSLIM_TIMEOUT_S = 12 * 3600


def msmodelslim_convert(
    emitter, source: Path, destination: Path, path: str, device: str, model_type: str
) -> dict:
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
    emitter.progress(5, _("Quantizing with msModelSlim"))
    ok, lines = run_logged(emitter, argv, MSMODELSLIM_TIMEOUT_S)
    if not ok:
        shutil.rmtree(staging, ignore_errors=True)
        hint = _diagnosed_hint(lines) or _(
            "msModelSlim failed: check that the source is the original BF16/FP16 Hugging Face folder, that "
            "the model type names one msModelSlim supports, and with --device npu that torch-npu sees the "
            "NPUs; the log above has msModelSlim's own error."
        )
        raise ModelTaskError("msmodelslim failed; see the log", hint)
    emitter.progress(95, _("Verifying the quantized model"))
    described = describe_folder(staging)
    if not str(described["facts"].get("quantization") or "").upper().startswith("W8A8"):
        raise ModelTaskError("verification failed: msmodelslim wrote no W8A8 model description")
    staging.rename(destination)
    emitter.progress(100, _("Quantized and verified"))
    return {
        "path": path,
        "size_bytes": folder_size(destination),
        "verification": {"passed": True},
        **described,
    }


def _diagnosed_hint(lines: list[str]) -> str:
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
    source = checked_model_dir(config.host_root, onnx_path, models_root)
    destination = checked_model_dir(config.host_root, path, models_root)
    if not source.is_file():
        raise ModelTaskError(
            f"{onnx_path} is not a file on {config.node_name}", _("Check the ONNX file's path.")
        )
    if destination.exists():
        raise ModelTaskError(
            f"{path} exists on {config.node_name}",
            _("Choose another output folder, or delete the model there first."),
        )
    staging = staging_dir(destination)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    atc = atc_argv(str(source), str(staging / "model"), soc_version, input_shape, input_format)
    argv = atc
    set_env = Path(config.ascend_root) / "ascend-toolkit" / "set_env.sh"
    if set_env.is_file():
        argv = source_then_exec([str(set_env)], atc)
    elif shutil.which("atc") is None:
        raise ModelTaskError(
            "atc is not installed on this node",
            _("Install the CANN toolkit, which provides atc, then retry."),
        )
    emitter.progress(5, _("Converting {file} for {soc}").format(file=Path(onnx_path).name, soc=soc_version))
    ok, lines = run_logged(emitter, argv, ATC_TIMEOUT_S, shown=atc)
    om_file = staging / "model.om"
    if not ok or not om_file.is_file():
        shutil.rmtree(staging, ignore_errors=True)
        hint = _diagnosed_hint(lines) or _(
            "ATC failed: check --input_shape names and sizes against the ONNX inputs and that soc_version "
            "matches this node's NPUs (npu-smi info)."
        )
        raise ModelTaskError("atc did not produce model.om; see the log", hint)
    staging.rename(destination)
    emitter.progress(100, _("Converted"))
    return {
        "path": path,
        "format": "om",
        "size_bytes": folder_size(destination),
        "facts": {"om_files": ["model.om"], "soc_version": soc_version, "input_shape": input_shape},
    }


atc_model = agent_task(AGENT_ATC_MODEL)(operation_task(atc_body, host_locks.CONVERSION))
