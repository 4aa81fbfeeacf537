"""A node's models roots: the folders model work on it may touch (register, inspect, download, convert,
copy to, delete, deploy from). Paths are refused here, at the edge, with the field to correct; the agent
checks again on the host after symlinks are resolved, against its own ASCEND_PANEL_MODELS_ROOT
(workers.models.node_paths), so a root the panel allows but the host does not is still refused there."""

import posixpath

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from workers.models.node_paths import UnsafePathError, is_inside, normalise

MAX_ROOTS = 8


def check_models_roots(roots, field: str = "models_roots") -> list[str]:
    """Absolute, normalised, distinct folders (not / itself: that would allow every path on the host)."""
    if isinstance(roots, str):
        roots = roots.splitlines()
    cleaned = []
    for root in roots:
        root = str(root).strip()
        if not root:
            continue
        try:
            root = normalise(root)
        except UnsafePathError:
            raise ValidationError(
                {field: [_("%(root)s is not an absolute path; give one like /data/models.") % {"root": root}]}
            ) from None
        if root == "/":
            refusal = _(
                "/ would let model work touch every file on the host; give a folder like /data/models."
            )
            raise ValidationError({field: [refusal]})
        if root not in cleaned:
            cleaned.append(root)
    if not cleaned:
        raise ValidationError({field: [_("Give at least one models root, e.g. /data/models.")]})
    if len(cleaned) > MAX_ROOTS:
        raise ValidationError({field: [_("Give at most %(n)d models roots.") % {"n": MAX_ROOTS}]})
    return cleaned


def path_under_roots(node, path: str, field: str = "path") -> str:
    """`path` normalised, when it lies strictly inside one of `node`'s models roots; else a ValidationError
    on `field` that names the roots and where to change them."""
    roots = node.models_roots or []
    try:
        normalised = normalise(path)
    except UnsafePathError:
        example = posixpath.join(roots[0], "my-model") if roots else "/data/models/my-model"
        raise ValidationError(
            {field: [_("Give an absolute path on the node, e.g. %(example)s.") % {"example": example}]}
        ) from None
    if not is_inside(normalised, roots):
        raise ValidationError(
            {
                field: [
                    _(
                        "%(path)s is not inside the models roots of %(node)s (%(roots)s). Put the model in "
                        "one of them, or ask an admin to add its folder to the node's models roots."
                    )
                    % {"path": normalised, "node": node.name, "roots": ", ".join(roots)}
                ]
            }
        )
    return normalised
