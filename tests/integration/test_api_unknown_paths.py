"""An /api/ URL no route matches is the documented JSON 404 for every method and every kind of caller (none,
an API token, a browser session without its CSRF token), never a CSRF 403 blamed on the caller's role; a path
that misses an endpoint by its trailing slash says which path it meant. Known paths keep their
authentication, role and CSRF checks."""

import pytest
from django.test import Client
from rest_framework.test import APIClient

from panel.accounts.models import ApiToken

pytestmark = pytest.mark.django_db

METHODS = ["get", "post", "put", "patch", "delete"]


@pytest.fixture(params=[False, True], ids=["debug-off", "debug-on"])
def debug(request, settings):
    settings.DEBUG = request.param
    return request.param


def caller(kind, user):
    """A client as a script (token), a browser (session, CSRF enforced as in production) or nobody."""
    if kind == "token":
        _token, raw = ApiToken.issue(user, f"probe-{kind}")
        client = APIClient(enforce_csrf_checks=True)
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        return client
    client = APIClient(enforce_csrf_checks=True)
    if kind == "session":
        client.force_login(user)
    return client


def send(client, method, url):
    if method in ("get", "delete"):
        return getattr(client, method)(url)
    return getattr(client, method)(url, {"name": "x"}, format="json")


def assert_json_404(response, url):
    assert response.status_code == 404, response.content
    assert response["Content-Type"] == "application/json"
    detail = response.json()["detail"]
    assert detail.startswith(f"No API endpoint or object at {url}."), detail
    return detail


@pytest.mark.parametrize("kind", ["anonymous", "token", "session"])
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    "url",
    ["/api/v1/deployments", "/api/v1", "/api/v1/nope/", "/api/v1/nope", "/api/v2/nodes/", "/api/"],
)
def test_an_unknown_api_path_is_a_json_404_for_every_method_and_caller(alice, debug, kind, method, url):
    assert_json_404(send(caller(kind, alice), method, url), url)


@pytest.mark.parametrize(
    ("url", "meant"),
    [
        ("/api/v1/deployments", "/api/v1/deployments/"),
        ("/api/v1", "/api/v1/"),
        ("/api/v1/nodes/sim-a2/drain", "/api/v1/nodes/sim-a2/drain/"),
        ("/api/schema", "/api/schema/"),
    ],
)
@pytest.mark.parametrize("method", ["get", "post"])
def test_a_known_path_without_its_trailing_slash_names_the_path_it_needs(alice, method, url, meant):
    detail = assert_json_404(send(caller("token", alice), method, url), url)
    assert detail.endswith(f"This path needs its trailing slash: {meant}"), detail


def test_a_file_route_given_a_trailing_slash_names_the_path_without_it(alice):
    url = "/api/v1/deployments/qwen-chat/logs.txt/"
    detail = assert_json_404(send(caller("token", alice), "get", url), url)
    assert detail.endswith("This path takes no trailing slash: /api/v1/deployments/qwen-chat/logs.txt")


@pytest.mark.parametrize("url", ["/api/v1/nope/", "/api/v1/nodes/sim-a2/no-such-action/", "/api/v2/nodes"])
def test_a_path_that_is_not_an_endpoint_either_way_gets_no_hint(alice, url):
    assert assert_json_404(send(caller("token", alice), "post", url), url) == (
        f"No API endpoint or object at {url}."
    )


# ---- known paths keep their checks -----------------------------------------------------------------------


def test_a_known_path_still_wants_credentials(debug):
    response = send(caller("anonymous", None), "post", "/api/v1/deployments/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"


def test_a_known_path_still_checks_the_role(charlie):
    response = send(caller("token", charlie), "post", "/api/v1/deployments/")
    assert response.status_code == 403
    assert response.json()["detail"]


def test_a_session_without_its_csrf_token_is_refused_on_a_known_path_and_told_why(bob):
    response = send(caller("session", bob), "post", "/api/v1/deployments/")
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]


def test_a_session_with_its_csrf_token_gets_through_to_the_endpoint(bob):
    client = Client(enforce_csrf_checks=True)
    client.force_login(bob)
    client.get("/")  # the page sets the CSRF cookie, as a browser's first page does
    token = client.cookies["csrftoken"].value
    response = client.post(
        "/api/v1/deployments/", {}, content_type="application/json", HTTP_X_CSRFTOKEN=token
    )
    assert response.status_code == 400, response.content  # past authentication, role and CSRF: the body
    assert "name" in response.json()["errors"]


def test_a_csrf_refusal_outside_a_drf_view_under_api_is_json_and_names_csrf(rf):
    from panel.core.rest.exceptions import csrf_failure

    response = csrf_failure(rf.post("/api/v1/anything/"), reason="CSRF cookie not set.")
    assert response.status_code == 403
    assert response["Content-Type"] == "application/json"
    assert "CSRF" in response.content.decode()
    page = csrf_failure(rf.post("/accounts/login/"), reason="CSRF cookie not set.")
    assert page.status_code == 403
    assert page["Content-Type"].startswith("text/html")


def test_the_hint_speaks_the_callers_language(alice):
    client = caller("token", alice)
    response = client.post("/api/v1/deployments", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert response.json()["detail"] == (
        "/api/v1/deployments 没有对应的 API 端点或对象。此路径需要末尾的斜杠：/api/v1/deployments/"
    )
