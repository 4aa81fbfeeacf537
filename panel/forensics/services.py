"""Use-cases of diagnostics bundles: collect one from every node of a deployment (on demand, or after a
failed start), take each node's upload, and pack the bundle once every node's operation ended.

Each node's agent gets an operation with an upload token (signed, bound to a fresh grant in the operation's
params, valid while the operation runs) and sends its tar.gz to `forensics:upload`. Uploads land in
DATA_DIR/diagnostics/<bundle>/<node>.tar.gz; the packed bundle is DATA_DIR/diagnostics/<bundle>.tar.gz.
The newest KEEP_PER_DEPLOYMENT bundles of a deployment are kept, older ones deleted with their files.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
from pathlib import Path

from django.conf import settings
from django.core import signing
from django.core.exceptions import ValidationError
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from panel.core.domain.choices import OperationKind, OperationStatus
from panel.forensics import assemble
from panel.forensics.models import BundleStatus, BundleTrigger, DiagnosticsBundle
from panel.operations.models import Operation
from panel.operations.services import create_operation
from panel.provisioning import conf
from panel.realtime.broadcast import broadcast, deployment_group
from workers.task_names import AGENT_COLLECT_DIAGNOSTICS

log = logging.getLogger(__name__)

UPLOAD_SALT = "panel.forensics.upload"
UPLOAD_TOKEN_MAX_AGE_S = 24 * 3600
MAX_UPLOAD_BYTES = 64 * 1024 * 1024
KEEP_PER_DEPLOYMENT = 5
OPEN = (OperationStatus.PENDING, OperationStatus.RUNNING)


def folder() -> Path:
    return Path(settings.DATA_DIR) / "diagnostics"


def upload_path(bundle: DiagnosticsBundle, node: str) -> Path:
    return folder() / str(bundle.pk) / f"{node}.tar.gz"


def collecting(deployment) -> DiagnosticsBundle | None:
    return DiagnosticsBundle.objects.filter(
        deployment=deployment.name, status=BundleStatus.COLLECTING
    ).first()


def collect(
    deployment, *, user=None, trigger=BundleTrigger.ON_DEMAND, panel_url: str = ""
) -> DiagnosticsBundle:
    """Ask every node of the deployment for its part of a bundle. Raises ValidationError when there is
    no address agents can send it to, or a collection of this deployment is under way."""
    panel_url = conf.public_url() or panel_url.rstrip("/")
    if not panel_url:
        raise ValidationError(_("Set PANEL_URL to the address agents reach the panel at; they upload there."))
    if collecting(deployment) is not None:
        raise ValidationError(_("A collection of this deployment is under way; wait for it."))
    nodes = list(deployment.nodes.order_by("name"))
    if not nodes:
        raise ValidationError(_("This deployment has no nodes to collect from."))
    parts = {part["node"]: part for part in deployment.spec.get("parts") or []}
    with transaction.atomic():
        bundle = DiagnosticsBundle.objects.create(
            deployment=deployment.name, trigger=trigger, node_names=[n.name for n in nodes], created_by=user
        )
        for node in nodes:
            grant = secrets.token_urlsafe(18)
            launch = (parts.get(node.name) or {}).get("launch") or {}
            create_operation(
                kind=OperationKind.DIAGNOSTICS,
                node=node,
                task_name=AGENT_COLLECT_DIAGNOSTICS,
                user=user,
                target=deployment.name,
                params={"bundle": bundle.pk, "upload_grant": grant},
                task_kwargs={
                    "request": {
                        "name": deployment.name,
                        "env": launch.get("env") or {},
                        "upload_url": panel_url + reverse("forensics:upload"),
                        "upload_token": signing.TimestampSigner(salt=UPLOAD_SALT).sign(grant),
                    }
                },
            )
        _announce(bundle)
    return bundle


def _announce(bundle: DiagnosticsBundle) -> None:
    """Tell the deployment's page its diagnostics box changed (it fetches the box again), once committed."""
    message = {"type": "deployment.diagnostics", "name": bundle.deployment, "bundle": bundle.pk}
    transaction.on_commit(lambda: broadcast(deployment_group(bundle.deployment), message))


def collect_after_failed_start(deployment) -> DiagnosticsBundle | None:
    """A bundle of a start that just failed, when agents have an address to send it to; never raises."""
    if not conf.public_url() or collecting(deployment) is not None:
        return None
    try:
        return collect(deployment, trigger=BundleTrigger.FAILED_START)
    except ValidationError as why:
        log.info("no diagnostics for %s: %s", deployment.name, why)
        return None


def operation_for_upload(token: str) -> Operation | None:
    try:
        grant = signing.TimestampSigner(salt=UPLOAD_SALT).unsign(token, max_age=UPLOAD_TOKEN_MAX_AGE_S)
    except signing.BadSignature:
        return None
    return (
        Operation.objects.select_related("node")
        .filter(kind=OperationKind.DIAGNOSTICS, params__upload_grant=grant, status__in=OPEN)
        .first()
    )


def store_upload(operation: Operation, stream) -> int:
    """Write a node's upload (read from `stream` in chunks, at most MAX_UPLOAD_BYTES) beside its bundle;
    returns its size. Raises ValidationError when it is too big or not a gzip archive."""
    bundle = DiagnosticsBundle.objects.get(pk=operation.params["bundle"])
    target = upload_path(bundle, operation.host.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.part")
    size = 0
    with open(partial, "wb") as out:
        while chunk := stream.read(1024 * 1024):
            size += len(chunk)
            if size > MAX_UPLOAD_BYTES:
                out.close()
                partial.unlink()
                raise ValidationError(
                    _("The bundle is larger than %(mb)d MB.") % {"mb": MAX_UPLOAD_BYTES >> 20}
                )
            out.write(chunk)
    with open(partial, "rb") as written:
        if written.read(2) != b"\x1f\x8b":
            partial.unlink()
            raise ValidationError(_("The upload is not a gzip archive."))
    os.replace(partial, target)
    with transaction.atomic():
        bundle = DiagnosticsBundle.objects.select_for_update().get(pk=bundle.pk)
        bundle.nodes = {
            **bundle.nodes,
            operation.host.name: {"received_at": timezone.now().isoformat(), "size": size},
        }
        bundle.save(update_fields=["nodes", "updated"])
    return size


def on_operation_terminal(operation: Operation) -> None:
    """A diagnostics operation ended (panel.operations.signals.operation_ended)."""
    bundle = (
        DiagnosticsBundle.objects.select_for_update()
        .filter(pk=(operation.params or {}).get("bundle"))
        .first()
    )
    if bundle is None or bundle.status != BundleStatus.COLLECTING:
        return
    if operation.status != OperationStatus.SUCCEEDED and operation.node is not None:
        seen = bundle.nodes.get(operation.node.name) or {}
        bundle.nodes = {
            **bundle.nodes,
            operation.node.name: {**seen, "error": operation.error or operation.status},
        }
    operations = Operation.objects.filter(kind=OperationKind.DIAGNOSTICS, params__bundle=bundle.pk)
    if operations.filter(status__in=OPEN).exclude(pk=operation.pk).exists():
        bundle.save(update_fields=["nodes", "updated"])
        return
    _pack(bundle)


def _pack(bundle: DiagnosticsBundle) -> None:
    nodes, contents = {}, {}
    for name in bundle.node_names:
        path = upload_path(bundle, name)
        seen = dict(bundle.nodes.get(name) or {})
        if not path.is_file():
            continue
        manifest, members = assemble.read_node_archive(path.read_bytes(), name)
        engine_log = next((data for member, data in members if member == "engine.log"), b"")
        seen.update(manifest=manifest, engine_log=engine_log.decode("utf-8", errors="replace"))
        nodes[name], contents[name] = seen, members
    summary, timeline = assemble.summarize(nodes)
    collected = sorted(nodes)
    summary["nodes"] = {name: bundle.nodes.get(name) or {} for name in bundle.node_names}
    summary["missing"] = [name for name in bundle.node_names if name not in collected]
    bundle.summary = summary
    bundle.finished = timezone.now()
    if not collected:
        bundle.status = BundleStatus.FAILED
    else:
        root = bundle.file_name.removesuffix(".tar.gz")
        data = assemble.pack(root, summary, timeline, contents)
        target = folder() / f"{bundle.pk}.tar.gz"
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.part")
        partial.write_bytes(data)
        os.replace(partial, target)
        bundle.archive, bundle.size = str(target.relative_to(settings.DATA_DIR)), len(data)
        bundle.status = BundleStatus.READY if not summary["missing"] else BundleStatus.PARTIAL
    bundle.save()
    shutil.rmtree(folder() / str(bundle.pk), ignore_errors=True)
    _forget_old(bundle.deployment)
    _announce(bundle)


def _forget_old(deployment: str) -> None:
    old = DiagnosticsBundle.objects.filter(deployment=deployment).exclude(status=BundleStatus.COLLECTING)
    for bundle in old.order_by("-created")[KEEP_PER_DEPLOYMENT:]:
        if bundle.archive:
            (Path(settings.DATA_DIR) / bundle.archive).unlink(missing_ok=True)
        bundle.delete()


def archive_path(bundle: DiagnosticsBundle) -> Path | None:
    path = Path(settings.DATA_DIR) / bundle.archive if bundle.archive else None
    return path if path is not None and path.is_file() else None
