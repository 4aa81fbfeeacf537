"""The plan API refuses, to an operator and to an admin alike, an engine variable off the allow-list
(GCONV_PATH: glibc loads iconv modules from it; VLLM_LOGGING_CONFIG_PATH: logging.config builds any class
its file names), naming it on the env field; code-loading ones stay an admin's."""

import json

import pytest

from tests.conftest import api_client_for
from tests.integration.test_launch_review import STACK_0_23, make_node, stage

pytestmark = pytest.mark.django_db


def plan_body(artifact, env: dict) -> dict:
    return {
        "name": "env-check",
        "model": str(artifact.model_id),
        "artifact": artifact.pk,
        "nodes": [{"node": artifact.node.name, "npus": [0]}],
        "env": env,
    }


@pytest.mark.parametrize("name", ["GCONV_PATH", "VLLM_LOGGING_CONFIG_PATH"])
def test_a_variable_off_the_allow_list_is_refused_to_operators_and_admins(name, alice, bob):
    artifact = stage(make_node(f"a2-{name[:4].lower()}", STACK_0_23))
    body = plan_body(artifact, {name: "/tmp/planted"})
    for user in (bob, alice):
        answer = api_client_for(user).post("/api/v1/deployments/plan/", body, format="json")
        assert answer.status_code == 400, answer.content
        assert name in json.dumps(answer.json())
        assert "allow-list" in json.dumps(answer.json())


def test_tuning_on_the_list_is_planned_for_an_operator(bob):
    artifact = stage(make_node("a2-tune", STACK_0_23))
    body = plan_body(artifact, {"HCCL_CONNECT_TIMEOUT": "600"})
    answer = api_client_for(bob).post("/api/v1/deployments/plan/", body, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["nodes"][0]["env"]["HCCL_CONNECT_TIMEOUT"] == "600"
