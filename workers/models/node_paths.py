"""Model paths on a node: as the node's own filesystem names them, mapped under the agent's host root.

The panel stores paths as the host sees them (/data/models/qwen2.5-7b). An agent on a simulated host
reads its files under ASCEND_PANEL_HOST_ROOT, so the same path lives at HOST_ROOT/data/models/qwen2.5-7b
there; on a real host the root is / and nothing changes.

Models roots: the folders model tasks may read, write and delete in. The agent's own are
ASCEND_PANEL_MODELS_ROOT (several separated by ":"); the panel keeps each node's (Node.models_roots) and
refuses other paths before a task is sent, and the agent checks again here, after symlinks are resolved.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable
from pathlib import Path

from workers.i18n import gettext_noop as _


class UnsafePathError(ValueError):
    """A path the agent refuses to write to or delete; the message says why."""

    hint = _(
        "Give an absolute path inside one of the node's models roots (the node's settings in the panel, and "
        "ASCEND_PANEL_MODELS_ROOT on the host)."
    )


def normalise(node_path: str) -> str:
    """The absolute, normalised form of a node path; refuses relative paths and NUL bytes."""
    if not isinstance(node_path, str) or not node_path.startswith("/") or "\0" in node_path:
        raise UnsafePathError(f"{node_path!r} is not an absolute path on the node")
    return posixpath.normpath(node_path)


def host_path(host_root: str, node_path: str) -> Path:
    """Where the node path `node_path` is on this machine, given the agent's host root."""
    return Path(host_root) / normalise(node_path).lstrip("/")


def roots_of(models_roots: str | Iterable[str]) -> list[str]:
    """Normalised models roots from a list, or from one string of them separated by ":"."""
    if isinstance(models_roots, str):
        models_roots = models_roots.split(":")
    return [normalise(root) for root in models_roots if root]


def _strictly_below(path: str, root: str) -> bool:
    return path != root and path.startswith(root.rstrip("/") + "/")


def is_inside(node_path: str, models_roots: str | Iterable[str]) -> bool:
    """Whether node_path is strictly below one of the models roots (a root itself is never a model
    folder), after normalisation (/data/models/../../etc is /etc)."""
    path = normalise(node_path)
    return any(_strictly_below(path, root) for root in roots_of(models_roots))


def checked_model_dir(host_root: str, node_path: str, models_roots: str | Iterable[str]) -> Path:
    """The host path of a model folder (or file) the agent may read, create or delete: strictly inside one
    of the models roots, also after symlinks are resolved (a link inside the root must not lead outside
    it)."""
    path_text = normalise(node_path)
    root_text = next((r for r in roots_of(models_roots) if _strictly_below(path_text, r)), None)
    if root_text is None:
        raise UnsafePathError(f"{node_path} is not inside the models root {models_roots}")
    root = host_path(host_root, root_text)
    path = host_path(host_root, path_text)
    real_root, real_path = os.path.realpath(root), os.path.realpath(path)
    if real_path == real_root or not real_path.startswith(real_root.rstrip("/") + "/"):
        raise UnsafePathError(f"{node_path} resolves to {real_path}, outside the models root {root_text}")
    return path


def staging_dir(destination: Path) -> Path:
    """The sibling a writer fills before renaming it to destination; deleting a model clears it too."""
    return destination.with_name(destination.name + ".tmp")
