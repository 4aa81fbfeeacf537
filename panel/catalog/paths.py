"""Where model operations may write on a node, and the checks every writing operation shares: the target
folder is inside one of the node's models roots (panel.nodes.models_roots), no copy is there, and no other
operation is writing it.
"""

import posixpath
import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from panel.catalog.models import Model, ModelArtifact
from panel.core.domain.choices import NodeTransport, OperationKind, OperationStatus
from panel.nodes.models_roots import path_under_roots
from panel.operations.models import Operation

WRITING_KINDS = (
    OperationKind.DOWNLOAD,
    OperationKind.CONVERT,
    OperationKind.ATC,
    OperationKind.COPY_MODEL,
    OperationKind.DELETE_MODEL,
)


def folder_name(text: str) -> str:
    """A folder name from a model name or repo id: Qwen/Qwen2.5-7B → Qwen--Qwen2.5-7B."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text.replace("/", "--")).strip("-.") or "model"


def default_path(node, model: Model, suffix: str = "") -> str:
    """Where a new copy of `model` goes on `node`: a folder named for it in the node's first models root."""
    name = folder_name(model.repo_id or model.name) + (f"-{suffix}" if suffix else "")
    roots = node.models_roots or [settings.PANEL_MODELS_ROOT]
    return posixpath.join(roots[0], name)


def free_path(node, path: str) -> str:
    """path, or path-2, path-3 ... : the first that no copy on the node uses."""
    taken = set(ModelArtifact.objects.filter(node=node, path__startswith=path).values_list("path", flat=True))
    candidate, number = path, 1
    while candidate in taken:
        number += 1
        candidate = f"{path}-{number}"
    return candidate


def check_agent_node(node, field="node"):
    if node is None:
        raise ValidationError({field: _("Choose a node.")})
    if node.transport != NodeTransport.AGENT:
        raise ValidationError(
            {
                field: _("Model operations run on the node's agent; %(node)s is reached over SSH.")
                % {"node": node.name}
            }
        )


def check_target_path(node, path: str, field="path") -> str:
    path = path_under_roots(node, path, field)
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
