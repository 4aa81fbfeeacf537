"""The review shows the launch decided per node's installed stack and chip: which CPU binder acts and why,
the chip recipe with a reason per variable and the user's overrides, DeepSeek as DP x TP with expert
parallel and EPLB; the API refuses flags the node's vLLM would reject, with the fix."""

import json

import pytest

from panel.catalog.models import Model, ModelArtifact
from panel.core.domain.choices import NpuHealth
from panel.nodes.models import Node, Npu
from tests.conftest import api_client_for
from tests.planner_inputs import DEEPSEEK_R1
from tests.wizard_steps import SMALL_QWEN, client_for, engine_fields, walk_to_engine_step

pytestmark = pytest.mark.django_db

KUNPENG = {
    "arch": "aarch64",
    "cpu": {"logical_cpus": 192, "threads_per_core": 1},
    "numa_nodes": [{"node": n, "cpus": 48} for n in range(4)],
    "hccl_ifname": "enp189s0f0",
}
STACK_0_23 = {"vllm-ascend": "0.23.0", "vllm": "0.23.0", "driver": "25.5.1", "cann-toolkit": "9.1.0"}
STACK_0_13 = {"vllm-ascend": "0.13.0", "vllm": "0.13.0", "driver": "25.5.0", "cann-toolkit": "8.5.0"}


def make_node(name, versions, chip_name="910B3", npus=8, address="10.0.0.5"):
    node = Node.objects.create(name=name, address=address, facts=KUNPENG, versions=versions)
    for npu_id in range(npus):
        Npu.objects.create(
            node=node,
            npu_id=npu_id,
            logic_id=npu_id,
            name=chip_name,
            health=NpuHealth.OK,
            hbm_total_mb=65536 if chip_name != "310P3" else 21527,
            numa_node=npu_id * 4 // npus,
        )
    return node


def stage(node, facts=SMALL_QWEN, name="Qwen/Qwen2.5-0.5B-Instruct"):
    model = Model.objects.create(name=name, facts=facts)
    return ModelArtifact.objects.create(
        model=model, node=node, path="/models/" + name.split("/")[-1], ready=True
    )


def review_page(client, artifact, npus, **engine):
    walk_to_engine_step(client, artifact, npus=npus)
    response = client.post("/deployments/new/engine/", engine_fields(**engine))
    assert response.status_code == 302, response.content.decode()[:3000]
    return client.get("/deployments/new/review/").content.decode()


def test_on_0_23_the_review_says_vllm_ascend_binds_and_the_command_has_no_numactl(bob):
    node = make_node("a2-new", STACK_0_23)
    page = review_page(client_for(bob), stage(node), ["a2-new:0"])
    assert 'data-binder="engine"' in page
    assert "vllm-ascend 0.23.0 binds its own CPUs" in page
    assert "stops irqbalance" in page
    assert "numactl --cpunodebind" not in page
    assert "{&quot;enable_cpu_binding&quot;:true}" in page


def test_on_0_13_numactl_binds_and_the_engine_binder_is_turned_off(bob):
    node = make_node("a2-old", STACK_0_13)
    page = review_page(client_for(bob), stage(node), ["a2-old:0"])
    assert 'data-binder="numactl"' in page
    assert "vllm-ascend 0.13.0 does not bind CPUs unless told to." in page
    assert "numactl --cpunodebind=0 --membind=0" in page
    assert "{&quot;enable_cpu_binding&quot;:false}" in page


def test_deepseek_on_a3_shows_the_recipe_dp4_tp4_eplb_and_the_users_override(bob):
    node = make_node("a3-node", STACK_0_23, chip_name="Ascend910_9391", npus=16)
    # DeepSeek-R1 in msModelSlim W8A8: about 640 GiB with 16-bit embeddings; one MTP layer in its config.
    r1 = {**DEEPSEEK_R1, "quantization": "W8A8_DYNAMIC", "weights_bytes": 640 * 1024**3, "mtp_layers": 1}
    artifact = stage(node, facts=r1, name="deepseek-ai/DeepSeek-R1-W8A8")
    npus = [f"a3-node:{n}" for n in range(16)]
    page = review_page(
        client_for(bob),
        artifact,
        npus,
        max_model_len="16384",
        env="HCCL_BUFFSIZE=512\nPYTORCH_NPU_ALLOC_CONF=max_split_size_mb:250",
        mtp_tokens="1",
    )
    assert 'data-testid="plan-layout">4 × 4<' in page
    for name in ("HCCL_OP_EXPANSION_MODE", "HCCL_IF_IP", "HCCL_SOCKET_IFNAME", "PYTORCH_NPU_ALLOC_CONF"):
        assert f'data-testid="recipe-{name}"' in page
    assert "Collectives are scheduled by the AI Vector cores" in page
    # On 0.23.0 balance scheduling is an additional_config key, not the variable.
    assert 'data-testid="recipe-additional_config.enable_balance_scheduling"' in page
    assert "HCCL_IF_IP=10.0.0.5" in page
    assert "Dynamic expert load balancing (EPLB) is on" in page
    assert "DYNAMIC_EPLB=true" in page
    assert "&quot;num_redundant_experts&quot;:16" in page
    assert "&quot;cudagraph_mode&quot;:&quot;FULL_DECODE_ONLY&quot;" in page
    assert "&quot;method&quot;:&quot;mtp&quot;" in page
    assert "MTP speculative decoding (1 draft token(s))" in page
    assert "HCCL holds 4 communicator(s) per NPU at 2 x HCCL_BUFFSIZE (512 MB)" in page
    assert page.count('data-testid="overridden"') == 2  # the recipe's allocator setting and the buffer size
    assert "recipe: expandable_segments:True" in page
    assert "PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:250" in page


def test_the_310p_recipe_lists_what_the_card_needs(bob):
    node = make_node("duo-node", STACK_0_23, chip_name="310P3", npus=2)
    page = review_page(client_for(bob), stage(node), ["duo-node:0"])
    assert 'data-testid="chip-recipe"' in page
    assert "Computes in float16 only" in page
    assert "W8A8SC" in page
    assert "--enforce-eager" in page


def plan_body(artifact, **engine):
    return {
        "name": "launch-check",
        "model": artifact.model_id,
        "artifact": artifact.pk,
        "nodes": [{"node": artifact.node.name, "npus": [0]}],
        **engine,
    }


def test_the_api_refuses_a_flag_the_nodes_vllm_dropped_and_names_the_fix(bob):
    artifact = stage(make_node("a2-api", STACK_0_23))
    response = api_client_for(bob).post(
        "/api/v1/deployments/plan/", plan_body(artifact, extra_flags={"--swap-space": 4}), format="json"
    )
    assert response.status_code == 400
    assert response.json()["errors"]["extra_flags"] == [
        "vLLM 0.23.0 no longer accepts --swap-space (gone since 0.18.0); use nothing (the V1 engine "
        "recomputes preempted requests)."
    ]


def test_the_api_warns_about_a_variable_vllm_ascend_moved_into_additional_config(bob):
    artifact = stage(make_node("a2-env", STACK_0_23))
    body = plan_body(artifact, env={"VLLM_ASCEND_ENABLE_FLASHCOMM1": "1"})
    review = api_client_for(bob).post("/api/v1/deployments/plan/", body, format="json").json()
    moved = next(item for item in review["warnings"] if item["code"] == "env_moved_to_config")
    assert '--additional-config {"enable_flashcomm1": true}' in moved["message"]
    assert review["nodes"][0]["env"]["VLLM_ASCEND_ENABLE_FLASHCOMM1"] == "1"
    binder = next(item for item in review["warnings"] if item["code"] == "cpu_binding_engine")
    assert binder["node"] == "a2-env"


def test_variables_that_load_code_are_for_admins(alice, bob):
    artifact = stage(make_node("a2-ld", STACK_0_23))
    body = plan_body(artifact, env={"LD_PRELOAD": "/usr/lib64/libjemalloc.so.2"})
    refused = api_client_for(bob).post("/api/v1/deployments/plan/", body, format="json")
    assert refused.status_code == 403
    assert "LD_PRELOAD" in json.dumps(refused.json())
    allowed = api_client_for(alice).post("/api/v1/deployments/plan/", body, format="json")
    assert allowed.status_code == 200
    assert allowed.json()["nodes"][0]["env"]["LD_PRELOAD"] == "/usr/lib64/libjemalloc.so.2"


def test_env_naming_the_npus_is_refused_on_its_field(bob):
    artifact = stage(make_node("a2-vis", STACK_0_23))
    body = plan_body(artifact, env={"ASCEND_RT_VISIBLE_DEVICES": "3"})
    response = api_client_for(bob).post("/api/v1/deployments/plan/", body, format="json")
    assert response.status_code == 400
    assert "choose the NPUs instead" in response.json()["errors"]["env"][0]


def test_the_wizard_puts_env_lines_back_into_the_field(bob):
    node = make_node("a2-form", STACK_0_23)
    client = client_for(bob)
    review_page(client, stage(node), ["a2-form:0"], env="OMP_NUM_THREADS=4\n# a note\nHCCL_BUFFSIZE=300")
    page = client.get("/deployments/new/engine/").content.decode()
    assert "OMP_NUM_THREADS=4\nHCCL_BUFFSIZE=300" in page
    bad = client.post("/deployments/new/engine/", engine_fields(env="JUST TEXT"))
    assert "Line 1: write NAME=value." in bad.content.decode()


def test_the_launch_blocks_read_in_chinese(bob):
    from tests.integration.test_pages_zh import english_left, english_msgids

    node = make_node("a3-zh", STACK_0_23, chip_name="Ascend910_9391", npus=16)
    r1 = {**DEEPSEEK_R1, "quantization": "W8A8_DYNAMIC", "weights_bytes": 640 * 1024**3, "mtp_layers": 1}
    artifact = stage(node, facts=r1, name="deepseek-ai/DeepSeek-R1-W8A8")
    client = client_for(bob)
    walk_to_engine_step(client, artifact, npus=[f"a3-zh:{n}" for n in range(16)])
    fields = engine_fields(max_model_len="16384", env="PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:250")
    assert client.post("/deployments/new/engine/", fields).status_code == 302
    page = client.get("/deployments/new/review/", HTTP_ACCEPT_LANGUAGE="zh-Hans").content.decode()
    assert "芯片配方" in page
    assert "vllm-ascend 自行绑定 CPU" in page
    assert "集合通信由 AI Vector 核直接经 RoCE 调度" in page
    assert "已开启动态专家负载均衡（EPLB）" in page
    names = {"a3-zh", "deepseek-r1-w8a8", "deepseek-ai", "irqbalance", "numactl", "worker", "release", "rank"}
    names |= {
        "config",
        "enable",
    }  # additional_config.enable_cpu_binding, an identifier in the binder's reason
    assert english_left(page, english_msgids(), names) == []


def test_a_node_known_by_host_name_gets_no_hccl_if_ip(bob):
    # HCCL_IF_IP takes an IP address only; the recipe leaves it out rather than pass a host name.
    node = make_node("a3-named", STACK_0_23, chip_name="Ascend910_9391", npus=16, address="a3-named.lab")
    r1 = {**DEEPSEEK_R1, "quantization": "W8A8_DYNAMIC", "weights_bytes": 640 * 1024**3}
    artifact = stage(node, facts=r1, name="deepseek-ai/DeepSeek-R1-W8A8")
    body = {
        **plan_body(artifact, max_model_len=16384),
        "nodes": [{"node": "a3-named", "npus": list(range(16))}],
    }
    review = api_client_for(bob).post("/api/v1/deployments/plan/", body, format="json").json()
    env = review["nodes"][0]["env"]
    assert "HCCL_IF_IP" not in env
    assert env["HCCL_SOCKET_IFNAME"] == "enp189s0f0"
    assert env["HCCL_OP_EXPANSION_MODE"] == "AIV"


def test_the_graph_mode_check_sees_the_mode_the_launch_sets(bob):
    # On an HDK older than 25.5.1 the default FULL_AND_PIECEWISE may fail to capture; DeepSeek runs
    # FULL_DECODE_ONLY (set by the launch), so only the other model is warned about.
    old_hdk = {**STACK_0_23, "driver": "25.2.0"}
    node = make_node("a3-oldhdk", old_hdk, chip_name="Ascend910_9391", npus=16)
    r1 = {**DEEPSEEK_R1, "quantization": "W8A8_DYNAMIC", "weights_bytes": 640 * 1024**3}
    deepseek = stage(node, facts=r1, name="deepseek-ai/DeepSeek-R1-W8A8")
    qwen = stage(node)
    client = api_client_for(bob)
    body = {
        **plan_body(deepseek, max_model_len=16384),
        "nodes": [{"node": "a3-oldhdk", "npus": list(range(16))}],
    }
    codes = [
        item["code"]
        for item in client.post("/api/v1/deployments/plan/", body, format="json").json()["warnings"]
    ]
    assert "decode_graph_mode" in codes
    assert "graph_mode_needs_stack" not in codes
    review = client.post("/api/v1/deployments/plan/", plan_body(qwen), format="json").json()
    warning = next(item for item in review["warnings"] if item["code"] == "graph_mode_needs_stack")
    assert "this node has HDK 25.2.0 and CANN 9.1.0" in warning["message"]
