"""On the real web server (uvicorn, as production runs it), /v1 refuses a body over the API's limit with 413
in OpenAI's error shape, whether its length is declared or it comes chunked; a body under the limit goes on
to the gateway's usual checks. tests/unit/test_gateway_body_limit.py counts what the gateway reads."""

import pytest

from tests.gateway_helpers import live_gateway  # noqa: F401  a fixture, used by name

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

MB = 1024 * 1024


def chat_body(size: int) -> bytes:
    head, tail = b'{"model": "chat", "messages": [{"role": "user", "content": "', b'"}]}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


def assert_too_large(response):
    assert response.status_code == 413, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"] == {
        "message": "The request body is larger than the 2.5 MB the panel takes.",
        "type": "invalid_request_error",
        "param": None,
        "code": "request_too_large",
    }


def test_a_30_mb_body_with_its_length_declared_is_a_413(live_gateway):  # noqa: F811
    with live_gateway.client("sk-any") as client:
        response = client.post(
            "/v1/chat/completions", content=chat_body(30 * MB), headers={"content-type": "application/json"}
        )
    assert_too_large(response)


def test_a_30_mb_chunked_body_is_a_413(live_gateway):  # noqa: F811
    body = chat_body(30 * MB)

    def chunks():  # an iterator: httpx sends it with Transfer-Encoding: chunked, no Content-Length
        for start in range(0, len(body), 64 * 1024):
            yield body[start : start + 64 * 1024]

    with live_gateway.client("sk-any") as client:
        response = client.post(
            "/v1/chat/completions", content=chunks(), headers={"content-type": "application/json"}
        )
    assert_too_large(response)


def test_a_body_under_the_limit_goes_on_to_the_key_check(live_gateway):  # noqa: F811
    with live_gateway.client("sk-not-a-key") as client:
        response = client.post(
            "/v1/chat/completions", content=chat_body(2 * MB), headers={"content-type": "application/json"}
        )
    assert response.status_code == 401, response.text
    assert response.json()["error"]["type"] == "invalid_request_error"
