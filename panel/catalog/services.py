"""Use-cases for models: register, load the starter catalog, start node operations, record their results.

Every operation that writes on a node targets a folder inside settings.PANEL_MODELS_ROOT; the agent checks
that again before it writes or deletes anything.
"""

import posixpath
import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from panel.catalog.models import FactsSource, Model, ModelArtifact
from panel.core.choices import ArtifactFormat, ModelSource, NodeTransport, OperationKind, OperationStatus
from panel.operations.models import Operation
from panel.operations.services import create_operation
from workers import task_names
from workers.models.catalog import FACT_KEYS, find_model, load_catalog
from workers.models.commands import (
    CommandInputError,
    atc_argv,
    msmodelslim_argv,
    msmodelslim_model_type,
    rsync_argv,
    soc_version_for,
)
from workers.models.node_paths import UnsafePathError, is_inside, normalise

CONVERSION_TARGETS = ("w8a8_dynamic", "bfloat16", "float16")
CONVERSION_SUFFIXES = {"w8a8_dynamic": "w8a8", "bfloat16": "bf16", "float16": "fp16"}
BACKENDS = ("builtin", "msmodelslim")
WRITING_KINDS = (
    OperationKind.DOWNLOAD,
    OperationKind.CONVERT,
    OperationKind.ATC,
    OperationKind.COPY_MODEL,
    OperationKind.DELETE_MODEL,
)


def endpoint_for(source: str) -> str:
    return (
        settings.PANEL_HF_ENDPOINT
        if source == ModelSource.HUGGINGFACE
        else settings.PANEL_MODELSCOPE_ENDPOINT
    )


def folder_name(text: str) -> str:
    """A folder name from a model name or repo id: Qwen/Qwen2.5-7B → Qwen--Qwen2.5-7B."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text.replace("/", "--")).strip("-.") or "model"


def default_path(model: Model, suffix: str = "") -> str:
    name = folder_name(model.repo_id or model.name) + (f"-{suffix}" if suffix else "")
    return posixpath.join(settings.PANEL_MODELS_ROOT, name)


def free_path(node, path: str) -> str:
    """path, or path-2, path-3 ... : the first that no copy on the node uses."""
    taken = set(ModelArtifact.objects.filter(node=node, path__startswith=path).values_list("path", flat=True))
    candidate, number = path, 1
    while candidate in taken:
        number += 1
        candidate = f"{path}-{number}"
    return candidate


def _check_agent_node(node, field="node"):
    if node is None:
        raise ValidationError({field: _("Choose a node.")})
    if node.transport != NodeTransport.AGENT:
        raise ValidationError(
            {
                field: _("Model operations run on the node's agent; %(node)s is reached over SSH.")
                % {"node": node.name}
            }
        )


def _check_target_path(node, path: str, field="path") -> str:
    try:
        path = normalise(path)
    except UnsafePathError:
        raise ValidationError(
            {
                field: _("Give an absolute path, e.g. %(example)s.")
                % {"example": posixpath.join(settings.PANEL_MODELS_ROOT, "my-model")}
            }
        ) from None
    if not is_inside(path, settings.PANEL_MODELS_ROOT):
        raise ValidationError(
            {
                field: _("The path must be inside the models root %(root)s.")
                % {"root": settings.PANEL_MODELS_ROOT}
            }
        )
    if ModelArtifact.objects.filter(node=node, path=path).exists():
        raise ValidationError(
            {
                field: _(
                    "%(node)s already has a model at %(path)s. Choose another output folder, e.g. "
                    "%(free)s, or delete that copy first."
                )
                % {"node": node.name, "path": path, "free": free_path(node, path)}
            }
        )
    if Operation.objects.filter(
        node=node,
        kind__in=WRITING_KINDS,
        status__in=[OperationStatus.PENDING, OperationStatus.RUNNING],
        params__path=path,
    ).exists():
        raise ValidationError(
            {
                field: _("Another operation is writing %(path)s on %(node)s.")
                % {"path": path, "node": node.name}
            }
        )
    return path


def _unique_name(base: str) -> str:
    name, n = base[:200], 2
    while Model.objects.filter(name=name).exists():
        name, n = f"{base[:190]}-{n}", n + 1
    return name


def catalog_facts(entry: dict) -> dict:
    return {key: entry[key] for key in FACT_KEYS}


def load_starter_catalog() -> tuple[int, int]:
    """Create or refresh one Model per starter catalog entry; facts inspected on a node are kept."""
    created = updated = 0
    with transaction.atomic():
        for entry in load_catalog():
            hub = entry["hub"] or {}
            source = ModelSource.MODELSCOPE if hub.get("modelscope") else ModelSource.HUGGINGFACE
            model = (
                Model.objects.filter(catalog_id=entry["id"]).first()
                or Model.objects.filter(name=entry["id"]).first()
            )
            if model is None:
                model = Model(name=entry["id"], catalog_id=entry["id"])
                created += 1
            else:
                updated += 1
            model.catalog_id = entry["id"]
            model.source = model.source if model.pk else source
            model.repo_id = model.repo_id or hub.get(model.source) or hub.get(source)
            model.description = model.description or entry.get("params_note", "")
            if model.facts_source in ("", FactsSource.CATALOG):
                model.facts, model.facts_source, model.facts_updated = (
                    catalog_facts(entry),
                    FactsSource.CATALOG,
                    timezone.now(),
                )
            model.save()
    return created, updated


def register_model(
    *,
    source: str,
    name: str = "",
    repo_id: str = "",
    revision: str = "",
    node=None,
    path: str = "",
    description: str = "",
    user=None,
) -> tuple[Model, Operation | None]:
    """Add a model to the catalog: from a hub id (facts from the starter catalog and/or the hub through a
    node's agent) or from a folder already on a node (inspected there)."""
    if source not in ModelSource.values:
        raise ValidationError({"source": _("Choose HuggingFace, ModelScope or a path on a node.")})
    if source == ModelSource.LOCAL:
        _check_agent_node(node)
        try:
            path = normalise(path)
        except UnsafePathError:
            raise ValidationError(
                {"path": _("Give the absolute path of the model folder on the node.")}
            ) from None
        if ModelArtifact.objects.filter(node=node, path=path).exists():
            raise ValidationError(
                {"path": _("%(path)s on %(node)s is already registered.") % {"path": path, "node": node.name}}
            )
        base = name or posixpath.basename(path.rstrip("/")).removesuffix(".onnx")
    else:
        repo_id = repo_id.strip()
        if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repo_id):
            raise ValidationError(
                {"repo_id": _("Give the repository id as owner/name, e.g. Qwen/Qwen2.5-7B-Instruct.")}
            )
        if node is not None:
            _check_agent_node(node)
        base = name or repo_id.split("/")[-1]
    if name and Model.objects.filter(name=name).exists():
        raise ValidationError({"name": _("A model named %(name)s exists already.") % {"name": name}})
    with transaction.atomic():
        model = Model.objects.create(
            name=name or _unique_name(base),
            source=source,
            repo_id=repo_id if source != ModelSource.LOCAL else "",
            revision=revision.strip(),
            description=description,
        )
        operation = None
        if source == ModelSource.LOCAL:
            artifact = ModelArtifact.objects.create(model=model, node=node, path=path, ready=False)
            operation = start_inspection(artifact, user)
        else:
            entry = find_model(repo_id)
            if entry:
                model.facts, model.facts_source = catalog_facts(entry), FactsSource.CATALOG
                model.catalog_id, model.facts_updated = entry["id"], timezone.now()
                model.save()
            if node is not None:
                operation = start_hub_inspection(model, node, user)
    return model, operation


class ModelInUse(Exception):
    """A deployment serves this model; the message names it."""


def update_model(model: Model, *, source: str, repo_id="", revision="", node=None, path="", description=""):
    """Bring a registered model up to what PUT /models/{name}/ says; the fields that changed. Where it
    comes from (source, folder) is what it is: changing that is a new model."""
    if source != model.source:
        raise ValidationError(
            {
                "source": _("%(name)s comes from %(source)s; register another name for another source.")
                % {"name": model.name, "source": model.get_source_display()}
            }
        )
    wanted = {"description": description, "revision": revision.strip()}
    if source != ModelSource.LOCAL and repo_id:
        wanted["repo_id"] = repo_id.strip()
    changed = [key for key, value in wanted.items() if getattr(model, key) != value]
    for key in changed:
        setattr(model, key, wanted[key])
    if changed:
        model.save()
    return changed


def delete_model(model: Model) -> list[str]:
    """Remove a model nothing serves; the copies whose records went (their files stay on the nodes)."""
    using = list(model.deployments.values_list("name", flat=True))
    if using:
        raise ModelInUse(
            _("Deployments %(names)s serve this model: delete them first.") % {"names": ", ".join(using)}
        )
    copies = [f"{artifact.node.name}:{artifact.path}" for artifact in model.artifacts.select_related("node")]
    model.delete()
    return copies


def _hub_kwargs(model: Model) -> dict:
    return {
        "source": model.source,
        "repo_id": model.repo_id,
        "revision": model.revision,
        "endpoint": endpoint_for(model.source),
    }


def start_hub_inspection(model: Model, node, user=None) -> Operation:
    _check_agent_node(node)
    if model.source == ModelSource.LOCAL:
        raise ValidationError(
            {"source": _("This model has no hub id; inspect one of its artifacts instead.")}
        )
    return create_operation(
        kind=OperationKind.INSPECT_MODEL,
        node=node,
        task_name=task_names.AGENT_INSPECT_MODEL,
        user=user,
        target=model.name,
        params={"model": model.pk, "hub": True},
        task_kwargs={"hub": _hub_kwargs(model)},
    )


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
    _check_agent_node(artifact.node)
    return _start_on_artifact(
        artifact,
        OperationKind.INSPECT_MODEL,
        task_names.AGENT_INSPECT_MODEL,
        user,
        params={"artifact": artifact.pk, "path": artifact.path},
        task_kwargs={"path": artifact.path},
    )


def start_download(model: Model, node, user=None, path: str = "") -> Operation:
    _check_agent_node(node)
    if model.source == ModelSource.LOCAL:
        raise ValidationError(
            {"node": _("This model has no hub id to download from; copy an artifact instead.")}
        )
    path = _check_target_path(node, path or default_path(model))
    return create_operation(
        kind=OperationKind.DOWNLOAD,
        node=node,
        task_name=task_names.AGENT_DOWNLOAD_MODEL,
        user=user,
        target=model.name,
        params={"model": model.pk, "path": path},
        task_kwargs={**_hub_kwargs(model), "path": path, "models_root": settings.PANEL_MODELS_ROOT},
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
    _check_agent_node(artifact.node)


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
    path = _check_target_path(
        artifact.node, path or default_path(artifact.model, CONVERSION_SUFFIXES[target])
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
    path = _check_target_path(
        artifact.node, path or default_path(artifact.model, f"om-{soc_version.lower()}")
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
    _check_agent_node(target_node, "target_node")
    if target_node.pk == artifact.node_id:
        raise ValidationError({"target_node": _("Choose another node than the one that has the copy.")})
    if not target_node.address:
        raise ValidationError(
            {"target_node": _("Set the address of %(node)s first.") % {"node": target_node.name}}
        )
    path = _check_target_path(target_node, artifact.path, "target_node")
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
    if not is_inside(artifact.path, settings.PANEL_MODELS_ROOT):
        raise ValidationError(
            {
                "artifact": _(
                    "%(path)s is outside the models root %(root)s; the panel never deletes "
                    "there. Remove it by hand, then forget the copy."
                )
                % {"path": artifact.path, "root": settings.PANEL_MODELS_ROOT}
            }
        )
    _check_agent_node(artifact.node)
    return _start_on_artifact(
        artifact,
        OperationKind.DELETE_MODEL,
        task_names.AGENT_DELETE_MODEL,
        user,
        params={"artifact": artifact.pk, "path": artifact.path},
        task_kwargs={"path": artifact.path, "models_root": settings.PANEL_MODELS_ROOT},
    )


def forget_artifact(artifact: ModelArtifact) -> None:
    """Drop the record of a copy without touching the node (for paths outside the models root)."""
    _refuse_if_deployed(artifact)
    artifact.delete()
