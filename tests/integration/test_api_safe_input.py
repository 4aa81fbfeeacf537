"""Hostile bodies are refused fast and briefly: YAML alias bombs, bodies too deep, keys given twice, a form
where JSON is documented, `"replicas": "2"` for a number; and no error quotes more than a short prefix of
the value it refuses."""

import json
import time

import pytest

from panel.deployments.models import Deployment
from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db

SPEC_URL = "/api/v1/deployments/bomb/"


def alias_bomb(levels: int, width: int = 9) -> str:
    """A spec whose `labels` expands to width**levels values through anchors and aliases."""
    lines = [f"  l0: &l0 [{', '.join(['lol'] * width)}]"]
    for level in range(1, levels):
        lines.append(f"  l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * width)}]")
    return "name: bomb\nmodel: tiny\npath: /models/tiny\nlabels:\n" + "\n".join(lines) + "\n"


def put_yaml(client, text: str):
    return client.put(SPEC_URL, text.encode(), content_type="application/yaml")


def test_a_yaml_alias_bomb_in_labels_is_refused_at_once_with_a_short_error(bob):
    body = alias_bomb(levels=9)
    assert len(body) < 700
    client = api_client_for(bob)
    client.get("/api/v1/deployments/")  # the first API request reads the schema strict checks by
    started = time.monotonic()
    response = put_yaml(client, body)
    assert time.monotonic() - started < 3  # it held a web process 90 s
    assert response.status_code == 400, response.content[:300]
    assert len(response.content) < 500
    assert "YAML aliases" in response.json()["detail"]
    assert not Deployment.objects.exists()


def test_a_six_level_bomb_gets_a_short_error_not_its_expanded_value(bob):
    body = alias_bomb(levels=6)
    assert len(body) < 400
    response = put_yaml(api_client_for(bob), body)
    assert response.status_code == 400, response.content[:300]
    assert len(response.content) < 500


def test_wide_shared_blocks_are_measured_as_expanded(bob):
    block = "[" + ", ".join(["x"] * 3000) + "]"
    labels = "{a: *s, b: *s, c: *s, d: *s, e: *s, f: *s, g: *s}"
    body = f"name: bomb\nmodel: tiny\nshared: &s {block}\nlabels: {labels}\n"
    response = put_yaml(api_client_for(bob), body)
    assert response.status_code == 400
    assert "more than" in response.json()["detail"]


def test_a_few_yaml_aliases_still_share_a_block(bob):
    # A shared block is fine; the spec is then read as usual (here: a model nobody has, a 400 about that).
    body = "name: bomb\nmodel: &m nobody-has-this\npath: /models/x\nlabels: {team: *m}\n"
    response = put_yaml(api_client_for(bob), body)
    assert "alias" not in response.json()["detail"]


def test_a_yaml_key_given_twice_is_refused_naming_it(bob):
    response = put_yaml(api_client_for(bob), "name: bomb\nmodel: tiny\nreplicas: 1\nreplicas: 3\n")
    assert response.status_code == 400
    assert response.json()["detail"] == "The key 'replicas' is given twice."


def test_a_json_key_given_twice_is_refused_naming_it(bob):
    response = api_client_for(bob).put(
        SPEC_URL,
        b'{"name": "bomb", "model": "tiny", "replicas": 1, "replicas": 3}',
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.json()["detail"] == "The key 'replicas' is given twice."


@pytest.mark.parametrize("opening", ["[", '{"a":'])
def test_a_json_body_nested_beyond_the_limit_is_a_400_not_a_server_error(bob, opening):
    body = opening * 50_000
    response = api_client_for(bob).put(SPEC_URL, body.encode(), content_type="application/json")
    assert response.status_code == 400
    assert "nests deeper" in response.json()["detail"]


def test_a_yaml_body_nested_beyond_the_limit_is_a_400_not_a_server_error(bob):
    response = put_yaml(api_client_for(bob), "a: " + "[" * 50_000)
    assert response.status_code == 400
    assert "nests deeper" in response.json()["detail"]


@pytest.mark.parametrize(
    ("method", "url"),
    [("put", SPEC_URL), ("post", "/api/v1/deployments/"), ("post", "/api/v1/tokens/")],
)
def test_a_form_encoded_body_where_json_is_documented_is_a_415(bob, method, url):
    response = getattr(api_client_for(bob), method)(
        url, "name=bomb&model=tiny&replicas=2", content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code == 415, response.content
    assert "application/x-www-form-urlencoded" in response.json()["detail"]
    assert not Deployment.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "bomb", "model": "tiny", "replicas": "2"}, "replicas"),
        ({"name": "bomb", "model": "tiny", "engine": {"max_model_len": "4096"}}, "engine.max_model_len"),
        ({"name": "bomb", "model": "tiny", "engine": {"enforce_eager": "true"}}, "engine.enforce_eager"),
        ({"name": "bomb", "model": 7}, "model"),
    ],
)
def test_a_value_of_the_wrong_json_type_is_refused_naming_its_field(bob, body, field):
    response = api_client_for(bob).put(SPEC_URL, body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"]
    assert field in response.json()["detail"]


def test_a_quoted_string_for_a_number_is_refused_in_yaml_too(bob):
    response = put_yaml(api_client_for(bob), "name: bomb\nmodel: tiny\nreplicas: '2'\n")
    assert response.status_code == 400
    assert response.json()["errors"] == {"replicas": ["Give a whole number, not a string."]}


def test_an_error_quotes_only_a_short_prefix_of_a_long_value(bob):
    value = "running" + "x" * 200_000
    response = api_client_for(bob).put(
        SPEC_URL, {"name": "bomb", "model": "tiny", "state": value}, format="json"
    )
    assert response.status_code == 400
    assert len(response.content) < 1000
    message = response.json()["errors"]["state"][0]
    assert message.startswith('"runningxxx')
    assert "…" in message
    assert message.endswith("is not a valid choice.")


def test_an_unknown_key_of_any_length_is_named_by_a_short_prefix(bob):
    key = "k" * 100_000
    response = api_client_for(bob).put(
        SPEC_URL, json.dumps({"name": "bomb", key: 1}), content_type="application/json"
    )
    assert response.status_code == 400
    assert len(response.content) < 1000


def test_the_refusals_read_in_chinese_for_a_chinese_client(bob):
    client = api_client_for(bob)
    typed = client.put(
        SPEC_URL, {"name": "bomb", "replicas": "2"}, format="json", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert typed.json()["errors"] == {"replicas": ["请给出整数，而不是字符串。"]}
    twice = client.put(
        SPEC_URL, b'{"a": 1, "a": 2}', content_type="application/json", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert twice.json()["detail"] == "键 'a' 出现了两次。"
