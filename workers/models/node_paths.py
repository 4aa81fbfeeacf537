"""Model paths on a node: as the node's own filesystem names them, mapped under the agent's host root.

The panel stores paths as the host sees them (/data/models/qwen2.5-7b). An agent on a simulated host
reads its files under ASCEND_PANEL_HOST_ROOT, so the same path lives at HOST_ROOT/data/models/qwen2.5-7b
there; on a real host the root is / and nothing changes.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

from workers.i18n import gettext_noop as _


class UnsafePathError(ValueError):
    """A path the agent refuses to write to or delete; the message says why."""

    hint = _("Give an absolute path inside the models root configured in the panel (PANEL_MODELS_ROOT).")


def normalise(node_path: str) -> str:
    """The absolute, normalised form of a node path; refuses relative paths and NUL bytes."""
    if not isinstance(node_path, str) or not node_path.startswith("/") or "\0" in node_path:
        raise UnsafePathError(f"{node_path!r} is not an absolute path on the node")
    return posixpath.normpath(node_path)


def host_path(host_root: str, node_path: str) -> Path:
    """Where the node path `node_path` is on this machine, given the agent's host root."""
    return Path(host_root) / normalise(node_path).lstrip("/")


def is_inside(node_path: str, models_root: str) -> bool:
    """Whether node_path is strictly below models_root (the root itself is never a model folder)."""
    path, root = normalise(node_path), normalise(models_root)
    return path != root and path.startswith(root.rstrip("/") + "/")


def checked_model_dir(host_root: str, node_path: str, models_root: str) -> Path:
    """The host path of a model folder the agent may create or delete: strictly inside the models root,
    also after symlinks are resolved (a link inside the root must not lead outside it)."""
    if not is_inside(node_path, models_root):
        raise UnsafePathError(f"{node_path} is not inside the models root {models_root}")
    root = host_path(host_root, models_root)
    path = host_path(host_root, node_path)
    real_root, real_path = os.path.realpath(root), os.path.realpath(path)
    if real_path == real_root or not real_path.startswith(real_root.rstrip("/") + "/"):
        raise UnsafePathError(f"{node_path} resolves to {real_path}, outside the models root {models_root}")
    return path


def staging_dir(destination: Path) -> Path:
    """The sibling a writer fills before renaming it to destination; deleting a model clears it too."""
    return destination.with_name(destination.name + ".tmp")
