"""Container images on a node: list, pull, load an archive from the package store, remove.

Each is an agent operation; its result carries the node's container facts afterwards (applied by
`apply_result` when it ends), so the node's page and the wizard see the images as they are now. Removing
an image a deployment on that node runs with is refused: the deployment would not start again.
"""

import secrets

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from panel.core.domain.choices import DesiredState, NodeTransport, OperationKind
from panel.deployments.launch.containers import images_on
from panel.deployments.models import Deployment
from panel.operations.services import create_operation
from panel.provisioning import conf
from panel.provisioning.models import PackageKind
from panel.provisioning.services import download_token, package_offer
from workers.containers.parse import split_reference
from workers.engine.launch.container import IMAGE_PATTERN
from workers.task_names import AGENT_LIST_IMAGES, AGENT_LOAD_IMAGE, AGENT_PULL_IMAGE, AGENT_REMOVE_IMAGE

IMAGE_KINDS = (
    OperationKind.IMAGE_LIST,
    OperationKind.IMAGE_PULL,
    OperationKind.IMAGE_LOAD,
    OperationKind.IMAGE_REMOVE,
)


class ImageRefused(Exception):
    """The node or the image's use forbids this (409); the message says why."""


def _checked(node, image: str | None = None) -> None:
    if node.transport != NodeTransport.AGENT:
        raise ImageRefused(
            _("%(node)s has no agent; container images are handled by the node's own agent.")
            % {"node": node.name}
        )
    if image is not None and not IMAGE_PATTERN.fullmatch(image):
        raise ValidationError(
            {"image": [_("%(image)s is not an image reference (registry/name:tag).") % {"image": image}]}
        )


def mirrored(image: str, mirror: str | None = None) -> str:
    """Where to pull `image` from: through PANEL_IMAGE_MIRROR when one is set (its registry replaced)."""
    mirror = (settings.PANEL_IMAGE_MIRROR if mirror is None else mirror).strip().rstrip("/")
    if not mirror:
        return image
    first, _sep, rest = image.partition("/")
    has_registry = bool(rest) and ("." in first or ":" in first or first == "localhost")
    return f"{mirror}/{rest if has_registry else image}"


def start_list(node, user=None):
    _checked(node)
    return create_operation(kind=OperationKind.IMAGE_LIST, node=node, task_name=AGENT_LIST_IMAGES, user=user)


def start_pull(node, image: str, user=None):
    _checked(node, image)
    source = mirrored(image)
    return create_operation(
        kind=OperationKind.IMAGE_PULL,
        node=node,
        task_name=AGENT_PULL_IMAGE,
        user=user,
        target=image,
        params={"image": image, "source": source},
        task_kwargs={"payload": {"image": image, "source": source}},
    )


def start_load(node, package, *, panel_url: str, user=None):
    """Load an image archive of the package store (its sha256 is checked on the node before loading)."""
    _checked(node)
    if package.kind != PackageKind.IMAGE:
        raise ValidationError(
            {"package": [_("%(name)s is not a container image archive.") % {"name": package.name}]}
        )
    if not package.sha256:
        raise ValidationError(
            {"package": [_("%(name)s waits for an admin's approval.") % {"name": package.name}]}
        )
    grant = secrets.token_urlsafe(18)
    entry = next(f for f in package_offer(conf.public_url() or panel_url) if f["name"] == package.name)
    return create_operation(
        kind=OperationKind.IMAGE_LOAD,
        node=node,
        task_name=AGENT_LOAD_IMAGE,
        user=user,
        target=package.name,
        params={"package": package.name, "sha256": package.sha256, "download_grant": grant},
        task_kwargs={"payload": {"file": entry, "download_token": download_token(grant)}},
    )


def users_of(node, image: str) -> list[str]:
    """Deployments on this node that run (or will run again) with this image."""
    live = Deployment.objects.filter(nodes=node, runtime_kind="container").exclude(
        desired_state=DesiredState.DELETED
    )
    return sorted(d.name for d in live if ((d.spec or {}).get("container") or {}).get("image") == image)


def start_remove(node, image: str, user=None):
    _checked(node, image)
    users = users_of(node, image)
    if users:
        raise ImageRefused(
            _("%(image)s is used by %(deployments)s on %(node)s; delete or change those deployments first.")
            % {"image": image, "deployments": ", ".join(users), "node": node.name}
        )
    return create_operation(
        kind=OperationKind.IMAGE_REMOVE,
        node=node,
        task_name=AGENT_REMOVE_IMAGE,
        user=user,
        target=image,
        params={"image": image},
        task_kwargs={"payload": {"image": image}},
    )


def apply_result(operation) -> None:
    """A finished image operation's view of the node's engines and images replaces the inventory's."""
    containers = (operation.result or {}).get("containers")
    if containers is None or operation.node is None:
        return
    node = operation.node
    node.facts = {**(node.facts or {}), "containers": containers}
    node.save(update_fields=["facts", "updated"])


def image_rows(node) -> list[dict]:
    """The node's images with the deployments that use each."""
    rows = []
    for image in images_on(node):
        reference = image.get("reference") or ""
        repository, tag = split_reference(reference)
        rows.append({**image, "repository": repository, "tag": tag, "used_by": users_of(node, reference)})
    return rows
