"""Every URL the panel resolves is walked, so an endpoint added tomorrow is covered without editing this file:
anonymous users get a sign-in redirect (pages, the API docs page among them) or 401/403 (API) unless the
URL is on the public allow-list below with its reason, and a viewer is refused (403/405) every unsafe method
except where viewers manage their own things (API tokens, language, sign-out)."""

import uuid

import pytest
from django.apps import apps
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve, reverse
from django.utils import timezone

from panel.audit.models import AuditEntry
from panel.catalog.models import Model, ModelArtifact
from panel.core.choices import DeploymentState
from panel.deployments.models import Benchmark, Deployment
from panel.fabric.models import FabricCheck
from panel.forensics.models import DiagnosticsBundle
from panel.gateway.models import UsageHour, UsageRecord
from panel.monitoring.models import Alert
from panel.nodes.models import Node
from panel.operations.models import Operation
from panel.provisioning.models import PackageFile

pytestmark = pytest.mark.django_db

UNSAFE_METHODS = ("post", "put", "patch", "delete")

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
# Where a viewer may write: their own API tokens and password, their language, signing out.
VIEWER_WRITES = {
    "accounts:change-password",
    "accounts:password-required",
    "accounts:login",
    "accounts:logout",
    "set_language",
    "accounts:create-token",
    "accounts:revoke-token",
    "apitoken-list",
    "apitoken-detail",
    "apitoken-sign-in",
}

# Routes another route answers first (none today: the API router makes no `.json` twins any more).
SHADOWED: set[str] = set()


def _patterns(patterns, namespace=""):
    """(full name, pattern) of every named URL, skipping Django's admin (its own staff check) and the
    `.json`-style format suffixes (the same view as their plain twin)."""
    for entry in patterns:
        if isinstance(entry, URLResolver):
            if entry.app_name == "admin":
                continue
            inner = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
            yield from _patterns(entry.url_patterns, inner)
        elif isinstance(entry, URLPattern) and entry.name and "format" not in entry.pattern.regex.groupindex:
            yield f"{namespace}{entry.name}", entry


@pytest.fixture
def rows(world):
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
        "apitoken": world["charlie"].api_tokens.model.issue(world["charlie"], "perm")[0],
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


def _kwargs(name: str, pattern: URLPattern, rows) -> dict:
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
            raise AssertionError(f"{name} takes {key}: teach _kwargs a sample value for it")
    return kwargs


def every_url(rows):
    urls = []
    for name, pattern in _patterns(get_resolver().url_patterns):
        if name in SHADOWED:
            continue
        urls.append((name, reverse(name, kwargs=_kwargs(name, pattern, rows))))
    return urls


def test_every_url_but_the_known_shadowed_ones_reaches_its_own_view(rows):
    shadowed = set()
    for name, pattern in _patterns(get_resolver().url_patterns):
        url = reverse(name, kwargs=_kwargs(name, pattern, rows))
        if resolve(url).func is not pattern.callback:
            shadowed.add(name)
    assert shadowed <= SHADOWED


def _is_api(url: str) -> bool:
    return url.startswith("/api/") and url != reverse("api-docs")


def _row_counts() -> dict:
    return {model._meta.label: model.objects.count() for model in apps.get_models()}


def test_the_walker_sees_the_panels_urls(rows):
    names = {name for name, _url in every_url(rows)}
    # A sample from each app, so an empty walk cannot pass the tests below.
    assert {"nodes:add", "node-inventory", "catalog:artifact-delete", "alert-acknowledge"} <= names
    assert {"provisioning:delete-package", "accounts:revoke-token", "core:dashboard", "api-docs"} <= names
    assert len(names) > 60


def test_anonymous_users_are_sent_to_sign_in_or_refused_everywhere_but_the_public_list(rows):
    client = Client()
    unguarded = []
    for name, url in every_url(rows):
        if name in PUBLIC:
            continue
        for method in ("get", *UNSAFE_METHODS):
            response = getattr(client, method)(url)
            if _is_api(url) or name in TOKEN_GUARDED:
                refused = response.status_code in (401, 403, 405)
            else:
                refused = response.status_code == 405 or (
                    response.status_code == 302 and "/accounts/login/" in response["Location"]
                )
            if not refused:
                unguarded.append(f"{method.upper()} {url} ({name}) -> {response.status_code}")
    assert not unguarded, "\n".join(unguarded)


def test_a_viewer_is_refused_every_unsafe_method_and_changes_nothing(rows, charlie):
    client = Client()
    client.force_login(charlie)
    before = _row_counts()
    allowed = []
    for name, url in every_url(rows):
        if name in VIEWER_WRITES:
            continue
        for method in UNSAFE_METHODS:
            response = getattr(client, method)(url, content_type="application/json", data={})
            if response.status_code not in (403, 405):
                allowed.append(f"{method.upper()} {url} ({name}) -> {response.status_code}")
    assert not allowed, "\n".join(allowed)
    assert _row_counts() == before


def test_the_metrics_exposition_refuses_an_address_outside_the_allow_list(rows, settings):
    settings.PANEL_METRICS_TOKEN = ""
    response = Client(REMOTE_ADDR="203.0.113.7").get(reverse("prometheus-metrics"))
    assert response.status_code == 403


def test_a_package_download_needs_a_token_of_a_running_operation(rows):
    package = rows["packagefile"]
    url = reverse("provisioning:download", args=[package.sha256, package.name])
    assert Client().get(url, HTTP_AUTHORIZATION=f"Bearer {uuid.uuid4().hex}").status_code == 403
