"""Walks every URL the panel resolves, with one row of each kind for the URLs that name one: the permission
tests and the 简体中文 page test both go through it, so an endpoint added tomorrow is covered by both."""

from datetime import timedelta

from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone

from panel.audit.models import AuditEntry
from panel.catalog.models import Model, ModelArtifact
from panel.core.domain.choices import DeploymentState
from panel.deployments.models import Benchmark, Deployment
from panel.fabric.models import FabricCheck
from panel.forensics.models import DiagnosticsBundle
from panel.gateway.models import UsageHour, UsageRecord
from panel.monitoring.models import Alert, Delivery, NotificationChannel, Route, Silence
from panel.nodes.models import Node
from panel.operations.models import Operation
from panel.provisioning.models import PackageFile

# URL names anyone may open, and why.
PUBLIC = {
    "accounts:login": "the sign-in page",
    "accounts:logout": "signing out needs no role",
    "set_language": "choosing a language on the sign-in page",
    "nodes:agent-install-script": "curl on a new host has no session; the script holds no secret",
    "nodes:agent-unit": "fetched by the install script; holds no secret",
    "nodes:agent-package": "fetched by the install script; the agent's code, no secret",
    "prometheus-metrics": "PANEL_METRICS_TOKEN or PANEL_METRICS_ALLOW guard it (tests run from 127.0.0.1)",
    "apitoken-sign-in": "a script's sign-in (ascend-panel login): the password in the body is the credential",
}
# Refused without a per-operation download token instead of a session (agents fetch store files), or
# without a join token (an install script trading it for its node's credential).
TOKEN_GUARDED = {"provisioning:download", "nodes:agent-join", "forensics:upload"}
# Routes another route answers first (none today: the API router makes no `.json` twins any more).
SHADOWED: set[str] = set()


def named_patterns(patterns, namespace=""):
    """(full name, pattern) of every named URL, skipping Django's admin (its own staff check) and the
    `.json`-style format suffixes (the same view as their plain twin)."""
    for entry in patterns:
        if isinstance(entry, URLResolver):
            if entry.app_name == "admin":
                continue
            inner = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
            yield from named_patterns(entry.url_patterns, inner)
        elif isinstance(entry, URLPattern) and entry.name and "format" not in entry.pattern.regex.groupindex:
            yield f"{namespace}{entry.name}", entry


def one_row_of_each(charlie) -> dict:
    """One row of every kind a URL can name, keyed by its URL basename."""
    node = Node.objects.create(name="perm-node", address="10.0.0.9")
    model = Model.objects.create(name="perm-model", source="path")
    artifact = ModelArtifact.objects.create(model=model, node=node, path="/data/models/perm", ready=True)
    deployment = Deployment.objects.create(
        name="perm-deployment",
        model=model,
        artifact=artifact,
        spec={"port": 8000, "served_model_name": "perm", "parts": []},
        observed_state=DeploymentState.RUNNING,
    )
    now = timezone.now()
    return {
        "node": node,
        "model": model,
        "modelartifact": artifact,
        "deployment": deployment,
        "benchmark": Benchmark.objects.create(deployment=deployment, deployment_name=deployment.name),
        "operation": Operation.objects.create(kind="inventory", node=node, target=node.name),
        "alert": Alert.objects.create(
            node=node,
            key="temp:0:0",
            kind="temperature",
            severity="warning",
            message="hot",
            first_seen=now,
            last_seen=now,
        ),
        "packagefile": PackageFile.objects.create(
            name="Ascend-cann-toolkit_8.3.RC2_linux-aarch64.run",
            kind="toolkit",
            version="8.3.RC2",
            sha256="a" * 64,
            size=1,
        ),
        "apitoken": charlie.api_tokens.model.issue(charlie, "perm")[0],
        "auditentry": AuditEntry.objects.create(action="node.added", target="perm-node"),
        "fabriccheck": FabricCheck.objects.create(node_names=["perm-node"]),
        "diagnosticsbundle": DiagnosticsBundle.objects.create(
            deployment="perm-deployment", trigger="on_demand"
        ),
        "usage": UsageRecord.objects.create(
            request_id="perm",
            time=now,
            key="charlie/perm",
            model="perm",
            endpoint="completions",
            status=200,
            duration_ms=1,
        ),
        "usage-hourly": UsageHour.objects.create(hour=now, key="charlie/perm", model="perm"),
        **notification_rows(now),
    }


def notification_rows(now) -> dict:
    channel = NotificationChannel.objects.create(
        name="perm-channel", kind="webhook", url="http://127.0.0.1:9/"
    )
    return {
        "notificationchannel": channel,
        "route": Route.objects.create(name="perm-route", channel=channel),
        "silence": Silence.objects.create(starts_at=now, ends_at=now + timedelta(hours=1), reason="perm"),
        "delivery": Delivery.objects.create(channel=channel, event="test", status="sent"),
    }


# Pages name their app; API routes are named <basename>-<action> (basename as in rows).
PAGE_ROWS = {
    "catalog:artifact-": "modelartifact",
    "catalog:": "model",
    "monitoring:": "alert",
    "operations:": "operation",
    "accounts:": "apitoken",
    "deployments:": "deployment",
    "provisioning:": "packagefile",
    "forensics:": "diagnosticsbundle",
}


def _row_for(name: str, rows):
    """The row whose key a URL takes."""
    for prefix, key in PAGE_ROWS.items():
        if name.startswith(prefix):
            return rows[key]
    basename = name.rsplit("-", 1)[0]
    return rows.get(basename) or rows.get(name.split("-")[0])


def sample_kwargs(name: str, pattern: URLPattern, rows) -> dict:
    row = _row_for(name, rows)
    kwargs = {}
    for key in pattern.pattern.regex.groupindex:
        if key == "pk":
            kwargs[key] = row.pk
        elif key == "ref":  # an id or a name: the id is the case that needs the row
            kwargs[key] = str(row.pk)
        elif key == "name":
            # A slug naming a deployment on its pages, a stored file's name in a download, else a node.
            kwargs[key] = (
                row.name if name.startswith(("deployments:", "provisioning:download")) else "perm-node"
            )
        elif key == "sha256":
            kwargs[key] = rows["packagefile"].sha256
        elif key == "step":
            kwargs[key] = "model"
        elif key == "action":
            kwargs[key] = "stop"
        else:
            raise AssertionError(f"{name} takes {key}: teach sample_kwargs a sample value for it")
    return kwargs


def every_url(rows):
    urls = []
    for name, pattern in named_patterns(get_resolver().url_patterns):
        if name in SHADOWED:
            continue
        urls.append((name, reverse(name, kwargs=sample_kwargs(name, pattern, rows))))
    return urls
