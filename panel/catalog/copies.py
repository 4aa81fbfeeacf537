"""Use-cases on a model's copies on nodes: inspect, convert, compile (ATC), copy to another node, delete,
forget. Each starts an agent operation on the node that holds the copy.

Every operation that writes on a node targets a folder inside one of the node's models roots; the agent
checks that again, after symlinks are resolved, before it writes or deletes anything.
"""

import posixpath

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from panel.catalog.models import ModelArtifact
from panel.catalog.paths import check_agent_node, check_target_path, default_path
from panel.core.domain.choices import ArtifactFormat, OperationKind
from panel.operations.models import Operation
from panel.operations.services import create_operation
from workers import task_names
from workers.models.commands import (
    CommandInputError,
    atc_argv,
    msmodelslim_argv,
    msmodelslim_model_type,
    rsync_argv,
    soc_version_for,
)
from workers.models.node_paths import is_inside

CONVERSION_TARGETS = ("w8a8_dynamic", "bfloat16", "float16")
CONVERSION_SUFFIXES = {"w8a8_dynamic": "w8a8", "bfloat16": "bf16", "float16": "fp16"}
BACKENDS = ("builtin", "msmodelslim")


def _start_on_artifact(artifact: ModelArtifact, kind, task_name, user, *, params, task_kwargs) -> Operation:
    """Start an agent operation on the node that holds the copy, recorded against the copy's model."""
    return create_operation(
        kind=kind,
        node=artifact.node,
        task_name=task_name,
        user=user,
        target=artifact.model.name,
        params={"model": artifact.model_id, **params},
        task_kwargs=task_kwargs,
    )


def start_inspection(artifact: ModelArtifact, user=None) -> Operation:
    check_agent_node(artifact.node)
    return _start_on_artifact(
        artifact,
        OperationKind.INSPECT_MODEL,
        task_names.AGENT_INSPECT_MODEL,
        user,
        params={"artifact": artifact.pk, "path": artifact.path},
        task_kwargs={"path": artifact.path},
    )


def _ready_source(artifact: ModelArtifact, formats: tuple) -> None:
    if not artifact.ready:
        raise ValidationError(
            {"artifact": _("This copy is not ready yet; wait for its inspection or download.")}
        )
    if artifact.format not in formats:
        raise ValidationError(
            {
                "artifact": _("This operation needs a copy in format %(formats)s.")
                % {"formats": ", ".join(formats)}
            }
        )
    check_agent_node(artifact.node)


def start_conversion(
    artifact: ModelArtifact,
    target: str,
    user=None,
    backend: str = "builtin",
    device: str = "npu",
    path: str = "",
    model_type: str = "",
) -> Operation:
    if target not in CONVERSION_TARGETS:
        raise ValidationError({"target": _("Choose W8A8_DYNAMIC, bfloat16 or float16.")})
    if backend not in BACKENDS or (backend == "msmodelslim" and target != "w8a8_dynamic"):
        raise ValidationError(
            {"backend": _("msModelSlim only quantizes (W8A8); dtype changes use the built-in converter.")}
        )
    _ready_source(artifact, (ArtifactFormat.HF,))
    path = check_target_path(
        artifact.node, path or default_path(artifact.node, artifact.model, CONVERSION_SUFFIXES[target])
    )
    task_extra = {}
    if backend == "msmodelslim":
        model_type = model_type or msmodelslim_model_type(artifact.model.repo_id, artifact.model.name)
        try:  # refused here, with the field to correct, rather than by the agent
            msmodelslim_argv(artifact.path, path, "w8a8", device, model_type)
        except CommandInputError as error:
            field = "model_type" if "model_type" in str(error) else "device"
            raise ValidationError({field: str(error)}) from None
        task_extra["model_type"] = model_type
    return _start_on_artifact(
        artifact,
        OperationKind.CONVERT,
        task_names.AGENT_CONVERT_MODEL,
        user,
        params={
            "source_artifact": artifact.pk,
            "path": path,
            "target": target,
            "backend": backend,
        },
        task_kwargs={
            "source_path": artifact.path,
            "path": path,
            "models_root": settings.PANEL_MODELS_ROOT,
            "target_format": target,
            "backend": backend,
            "device": device,
            **task_extra,
        },
    )


def soc_version_of(node) -> str:
    npu = node.npus.exclude(name="").first()
    try:
        return soc_version_for(npu.name if npu else "")
    except CommandInputError as error:
        raise ValidationError({"soc_version": str(error)}) from None


def start_atc(
    artifact: ModelArtifact,
    user=None,
    *,
    input_shape: str = "",
    input_format: str = "NCHW",
    soc_version: str = "",
    onnx_file: str = "",
    path: str = "",
) -> Operation:
    _ready_source(artifact, (ArtifactFormat.ONNX,))
    soc_version = soc_version or soc_version_of(artifact.node)
    files = artifact.facts.get("onnx_files") or []
    onnx_file = onnx_file or (files[0] if files else "")
    onnx_path = artifact.path if artifact.path.endswith(".onnx") else posixpath.join(artifact.path, onnx_file)
    path = check_target_path(
        artifact.node, path or default_path(artifact.node, artifact.model, f"om-{soc_version.lower()}")
    )
    try:
        atc_argv(onnx_path, posixpath.join(path, "model"), soc_version, input_shape, input_format)
    except CommandInputError as error:
        field = next(
            (f for f in ("input_shape", "input_format", "soc_version") if f in str(error)), "onnx_file"
        )
        raise ValidationError({field: str(error)}) from None
    return _start_on_artifact(
        artifact,
        OperationKind.ATC,
        task_names.AGENT_ATC_MODEL,
        user,
        params={
            "source_artifact": artifact.pk,
            "path": path,
            "soc_version": soc_version,
        },
        task_kwargs={
            "onnx_path": onnx_path,
            "path": path,
            "models_root": settings.PANEL_MODELS_ROOT,
            "soc_version": soc_version,
            "input_shape": input_shape,
            "input_format": input_format,
        },
    )


def start_copy(artifact: ModelArtifact, target_node, user=None, target_user: str = "root") -> Operation:
    """rsync the copy from its node to target_node (same path), run by the source node's agent over SSH.

    The agent logs in with its own key (ASCEND_PANEL_SSH_KEY or its user's ~/.ssh); the target's host key
    must be the fingerprint confirmed for target_node when it has one (a node first added over SSH), and
    otherwise be known to the agent user's known_hosts."""
    _ready_source(artifact, tuple(ArtifactFormat.values))
    check_agent_node(target_node, "target_node")
    if target_node.pk == artifact.node_id:
        raise ValidationError({"target_node": _("Choose another node than the one that has the copy.")})
    if not target_node.address:
        raise ValidationError(
            {"target_node": _("Set the address of %(node)s first.") % {"node": target_node.name}}
        )
    path = check_target_path(target_node, artifact.path, "target_node")
    try:  # refused here rather than by the agent, with the field to correct
        rsync_argv(artifact.path, target_user, target_node.address, path, target_node.ssh_port or 22)
    except CommandInputError as error:
        field = "target_user" if "user" in str(error) else "target_node"
        raise ValidationError({field: str(error)}) from None
    return _start_on_artifact(
        artifact,
        OperationKind.COPY_MODEL,
        task_names.AGENT_COPY_MODEL,
        user,
        params={
            "source_artifact": artifact.pk,
            "target_node": target_node.pk,
            "path": path,
        },
        task_kwargs={
            "path": artifact.path,
            "target_host": target_node.address,
            "target_path": path,
            "target_user": target_user,
            "target_port": target_node.ssh_port or 22,
            "target_host_key": target_node.ssh_host_key_fingerprint,
            "target_name": target_node.name,
        },
    )


class CopyInUse(ValidationError):
    """A deployment serves from this copy (409 in the API); the message names it."""


def _refuse_if_deployed(artifact: ModelArtifact) -> None:
    if using := list(artifact.deployments.values_list("name", flat=True)):
        names = {"names": ", ".join(using)}
        raise CopyInUse({"artifact": _("Deployments %(names)s use this copy; delete them first.") % names})


def start_artifact_delete(artifact: ModelArtifact, user=None) -> Operation:
    _refuse_if_deployed(artifact)
    if not is_inside(artifact.path, artifact.node.models_roots or []):
        raise ValidationError(
            {
                "artifact": _(
                    "%(path)s is outside the models roots of %(node)s (%(roots)s); the panel never deletes "
                    "there. Remove it by hand, then forget the copy."
                )
                % {
                    "path": artifact.path,
                    "node": artifact.node.name,
                    "roots": ", ".join(artifact.node.models_roots or []),
                }
            }
        )
    check_agent_node(artifact.node)
    return _start_on_artifact(
        artifact,
        OperationKind.DELETE_MODEL,
        task_names.AGENT_DELETE_MODEL,
        user,
        params={"artifact": artifact.pk, "path": artifact.path},
        task_kwargs={"path": artifact.path, "models_root": settings.PANEL_MODELS_ROOT},
    )
