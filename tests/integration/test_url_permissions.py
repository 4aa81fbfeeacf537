"""Every URL the panel resolves is walked, so an endpoint added tomorrow is covered without editing this file:
anonymous users get a sign-in redirect (pages, the API docs page among them) or 401/403 (API) unless the
URL is on the public allow-list below with its reason, and a viewer is refused (403/405) every unsafe method
except where viewers manage their own things (API tokens, language, sign-out)."""

import uuid

import pytest
from django.apps import apps
from django.test import Client
from django.urls import get_resolver, resolve, reverse

from tests.url_walk import PUBLIC, SHADOWED, TOKEN_GUARDED, every_url, named_patterns, sample_kwargs

pytestmark = pytest.mark.django_db

UNSAFE_METHODS = ("post", "put", "patch", "delete")

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


def test_every_url_but_the_known_shadowed_ones_reaches_its_own_view(rows):
    shadowed = set()
    for name, pattern in named_patterns(get_resolver().url_patterns):
        url = reverse(name, kwargs=sample_kwargs(name, pattern, rows))
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
