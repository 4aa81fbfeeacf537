"""The wizard's topology, routing, autoscaling and sleep (issues 35 and 36): the placement step takes one pool
of replicas or prefill and decode pools with the connector the node's engine version has (refused with the
launch matrix's reason where it has none), the engine step takes autoscale (each role's for prefill and
decode, with the targets that fit the role) and idle (sleep offered only where the engines can sleep), the
review shows them, and Deploy applies the same spec `PUT /api/v1/deployments/` takes. Invalid combinations
are refused on their field with the spec's own words, in both languages."""

import re

import pytest

from panel.catalog.models import Model, ModelArtifact
from panel.core.domain.choices import NpuHealth
from panel.deployments.models import Deployment
from panel.nodes.models import Node, Npu
from tests.wizard_steps import DECODE_AUTOSCALE_FIELDS, SMALL_QWEN, client_for, engine_fields

pytestmark = pytest.mark.django_db


def a2_node(name: str, versions: dict, address: str = "127.0.0.1") -> Node:
    node = Node.objects.create(name=name, address=address, versions=versions)
    for npu_id in range(8):
        Npu.objects.create(
            node=node, npu_id=npu_id, logic_id=npu_id, name="910B3", health=NpuHealth.OK, hbm_total_mb=65536
        )
    return node


@pytest.fixture
def qwen(db):
    node = a2_node("a2-node", {"vllm-ascend": "0.13.0", "vllm": "0.13.0"})
    model = Model.objects.create(name="qwen-small", facts=SMALL_QWEN)
    return ModelArtifact.objects.create(model=model, node=node, path="/models/qwen", ready=True)


@pytest.fixture
def old_stack(db):
    node = a2_node("old-node", {"vllm-ascend": "0.9.1", "vllm": "0.9.1"})
    model = Model.objects.create(name="qwen-old", facts=SMALL_QWEN)
    return ModelArtifact.objects.create(model=model, node=node, path="/models/qwen", ready=True)


def split_fields(**overrides) -> dict:
    fields = {
        "topology": "pd",
        "kv_connector": "mooncake",
        "prefill_replicas": "1",
        "prefill_node": "a2-node",
        "prefill_npus": "1",
        "decode_replicas": "1",
        "decode_node": "a2-node",
        "decode_npus": "1",
    }
    fields.update(overrides)
    return {key: value for key, value in fields.items() if value is not None}


def start(client, artifact, name="chat"):
    client.get("/deployments/new/")
    answer = client.post("/deployments/new/model/", {"artifact": artifact.pk, "name": name})
    assert answer.status_code == 302, answer.content.decode()[:2000]


def errors_of(page: str, field: str) -> str:
    found = re.search(rf'data-testid="error-{field}">(.*?)</ul>', page, re.S)
    return found.group(1) if found else ""


def test_a_1p1d_walk_creates_one_row_per_role_with_the_connector(bob, qwen):
    client = client_for(bob)
    start(client, qwen)
    page = client.get("/deployments/new/placement/").content.decode()
    assert 'data-testid="topology"' in page
    assert 'value="mooncake"' in page  # vllm-ascend 0.13.0 has it
    assert 'data-connector="nixl"' in page  # refused, with the matrix's reason
    assert "does not run on vllm-ascend" in page

    answer = client.post("/deployments/new/placement/", split_fields())
    assert answer.status_code == 302, answer.content.decode()[:3000]
    engine = client.get("/deployments/new/engine/").content.decode()
    assert 'data-testid="split-parallel"' in engine
    prefill = re.search(r'<select name="prefill_autoscale_target".*?</select>', engine, re.S).group(0)
    decode = re.search(r'<select name="decode_autoscale_target".*?</select>', engine, re.S).group(0)
    assert re.findall(r'value="(\w+)"', prefill) == ["waiting_per_replica", "ttft_p90_ms"]
    assert re.findall(r'value="(\w+)"', decode) == ["waiting_per_replica", "kv_usage"]
    preview = client.post("/deployments/new/plan/", engine_fields(max_model_len="2048")).content.decode()
    assert "--max-model-len 2048" in preview  # htmx re-plans the split through the spec's dry run
    assert "kv_producer" in preview
    answer = client.post("/deployments/new/engine/", engine_fields(max_model_len="1024", routing="prefix",
                                                                   **DECODE_AUTOSCALE_FIELDS))  # fmt: skip
    assert answer.status_code == 302, answer.content.decode()[:3000]

    review = client.get("/deployments/new/review/").content.decode()
    assert 'data-testid="review-roles"' in review
    assert "Mooncake (vllm-ascend)" in review
    assert re.search(r'data-role="decode">.*?a2-node', review, re.S)
    assert 'data-testid="review-problems"' not in review
    assert "Prompt prefix (cache-aware)" in review
    scaling = re.search(r'data-testid="review-autoscale">(.*?)</td>', review, re.S).group(1)
    assert re.search(
        r'data-role="decode">Decode: .*1–3 replicas, keeping KV cache usage under 0.8', scaling, re.S
    )
    assert 'data-role="prefill"' not in scaling

    answer = client.post("/deployments/new/review/")
    assert answer.status_code == 302
    assert answer["Location"].endswith("/deployments/chat/")
    rows = {row.name: row for row in Deployment.objects.filter(name__startswith="chat")}
    assert {name: row.role for name, row in rows.items()} == {"chat": "prefill", "chat-d1": "decode"}
    assert rows["chat"].roles_wanted == {"prefill": 1, "decode": 1}
    assert rows["chat"].routing == "prefix"
    launch = rows["chat-d1"].spec["parts"][0]["launch"]
    assert launch["kv_transfer_config"]["kv_role"] == "kv_consumer"
    assert launch["max_model_len"] == 1024
    assert rows["chat"].revisions.count() == 1
    scales = {"min": 1, "max": 3, "target": {"kv_usage": 0.8}, "up_after_s": 30, "down_after_s": 300}
    assert rows["chat"].autoscale == {"roles": {"decode": scales}}


@pytest.mark.parametrize(
    ("overrides", "field", "says"),
    [
        ({"decode_autoscale_min": "0"}, "decode_autoscale_min", "A role keeps at least one engine"),
        ({"decode_autoscale_max": "17"}, "decode_autoscale_max", "at most 16 engines"),
        ({"decode_autoscale_target": "ttft_p90_ms"}, "decode_autoscale_target", "valid choice"),
        ({"decode_autoscale_value": ""}, "decode_autoscale_value", "Give a value to scale with the load."),
    ],
)
def test_a_role_autoscale_that_cannot_hold_is_refused_on_its_field(bob, qwen, overrides, field, says):
    client = client_for(bob)
    start(client, qwen)
    assert client.post("/deployments/new/placement/", split_fields()).status_code == 302
    fields = engine_fields(max_model_len="1024", **{**DECODE_AUTOSCALE_FIELDS, **overrides})
    answer = client.post("/deployments/new/engine/", fields)
    assert answer.status_code == 200, answer.get("Location")
    assert says in errors_of(answer.content.decode(), field), answer.content.decode()[:4000]


def test_a_node_without_a_connector_refuses_the_split_with_the_matrix_reason(bob, old_stack):
    client = client_for(bob)
    start(client, old_stack, name="old")
    page = client.get("/deployments/new/placement/").content.decode()
    assert 'data-connector="mooncake"' in page
    assert "vllm-ascend 0.9.1 has no mooncake connector the panel knows" in page
    fields = split_fields(kv_connector=None, prefill_node="old-node", decode_node="old-node")
    answer = client.post("/deployments/new/placement/", fields)
    assert answer.status_code == 200
    text = errors_of(answer.content.decode(), "topology")
    assert "Prefill and decode cannot run here" in text
    assert "0.9.1 has no mooncake connector" in text


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        (split_fields(prefill_replicas="0"), "prefill_replicas", "greater than or equal to 1"),
        (split_fields(kv_connector=""), "kv_connector", "Choose the connector"),
        (split_fields(decode_npus="0"), "decode_npus", "number or"),
    ],
)
def test_an_invalid_split_is_refused_on_its_field(bob, qwen, fields, field, says):
    client = client_for(bob)
    start(client, qwen)
    answer = client.post("/deployments/new/placement/", fields)
    assert answer.status_code == 200, answer.get("Location")
    assert says in errors_of(answer.content.decode(), field), answer.content.decode()[:4000]
    assert not Deployment.objects.exists()


def pool(client, qwen, npus=("a2-node:0",), replicas="1"):
    start(client, qwen)
    answer = client.post("/deployments/new/placement/", {"topology": "pool", "npus": list(npus),
                                                          "replicas": replicas})  # fmt: skip
    assert answer.status_code == 302, answer.content.decode()[:3000]


def scaling(**overrides) -> dict:
    fields = engine_fields(
        max_model_len="1024",
        autoscale="on",
        autoscale_min="1",
        autoscale_max="3",
        autoscale_target="waiting_per_replica",
        autoscale_value="4",
        autoscale_up_after_s="30",
        autoscale_down_after_s="300",
        idle="on",
        idle_sleep_after_s="600",
        idle_level="1",
    )
    fields.update(overrides)
    return {key: value for key, value in fields.items() if value is not None}


def test_autoscale_and_idle_from_the_engine_step_reach_the_deployment(bob, qwen):
    client = client_for(bob)
    pool(client, qwen)
    engine = client.get("/deployments/new/engine/").content.decode()
    assert 'data-testid="autoscale-fields"' in engine
    assert 'data-testid="idle-fields"' in engine
    assert 'data-testid="sleep-refused"' not in engine  # loopback, vllm-ascend 0.13.0: it can sleep
    answer = client.post("/deployments/new/engine/", scaling())
    assert answer.status_code == 302, answer.content.decode()[:4000]
    review = client.get("/deployments/new/review/").content.decode()
    assert "1 to 3 replicas; up after 30 s, down after 300 s" in review
    assert "After 600 s without a request, at level 1" in review
    assert client.post("/deployments/new/review/").status_code == 302
    row = Deployment.objects.get(name="chat")
    assert row.autoscale == {"min": 1, "max": 3, "target": {"waiting_per_replica": 4.0}, "up_after_s": 30,
                             "down_after_s": 300}  # fmt: skip
    assert row.plan["idle"] == {"sleep_after_s": 600, "level": 1}


@pytest.mark.parametrize(
    ("overrides", "field", "says"),
    [
        ({"autoscale_min": "4"}, "autoscale_min", "min (4) is above max (3)."),
        ({"autoscale_min": "0", "idle": None}, "autoscale", "min 0 needs idle"),
        ({"idle_sleep_after_s": "10"}, "idle_sleep_after_s", "greater than or equal to 60"),
        ({"autoscale_value": ""}, "autoscale_value", "Give a value to scale with the load."),
    ],
)
def test_an_invalid_scaling_is_refused_on_its_field(bob, qwen, overrides, field, says):
    client = client_for(bob)
    pool(client, qwen)
    answer = client.post("/deployments/new/engine/", scaling(**overrides))
    assert answer.status_code == 200, answer.get("Location")
    assert says in errors_of(answer.content.decode(), field), answer.content.decode()[:4000]


def test_sleep_is_not_offered_where_the_engine_listens_on_the_network(bob, db):
    node = a2_node("remote", {"vllm-ascend": "0.13.0"}, address="10.0.0.9")
    model = Model.objects.create(name="qwen-remote", facts=SMALL_QWEN)
    copy = ModelArtifact.objects.create(model=model, node=node, path="/models/qwen", ready=True)
    client = client_for(bob)
    start(client, copy, name="remote-chat")
    client.post("/deployments/new/placement/", {"npus": ["remote:0"]})
    engine = client.get("/deployments/new/engine/").content.decode()
    refused = re.search(r'data-testid="sleep-refused">(.*?)</div>\s*</div>', engine, re.S)
    assert refused is not None
    assert "listens on the network" in refused.group(1)
    assert 'name="idle"' not in engine


def test_replicas_of_one_pool_and_the_page_in_chinese(bob, qwen):
    client = client_for(bob)
    client.cookies["django_language"] = "zh-hans"
    pool(client, qwen, replicas="2")
    assert client.post("/deployments/new/engine/", engine_fields(max_model_len="1024")).status_code == 302
    review = client.get("/deployments/new/review/").content.decode()
    assert "拓扑" in review
    assert client.post("/deployments/new/review/").status_code == 302
    assert sorted(Deployment.objects.values_list("name", flat=True)) == ["chat", "chat-r2"]


def test_a_name_taken_since_the_first_step_is_refused_not_applied_over(bob, qwen):
    client = client_for(bob)
    pool(client, qwen)
    assert client.post("/deployments/new/engine/", engine_fields(max_model_len="1024")).status_code == 302
    other = client_for(bob)
    pool(other, qwen, npus=("a2-node:1",))
    assert other.post("/deployments/new/engine/", engine_fields(max_model_len="2048")).status_code == 302
    assert other.post("/deployments/new/review/").status_code == 302
    answer = client.post("/deployments/new/review/")
    assert answer.status_code == 200
    assert "A deployment with this name exists." in answer.content.decode()
    assert Deployment.objects.get(name="chat").spec["max_model_len"] == 2048


def test_the_planner_says_a_model_that_fits_one_npu_is_not_worth_splitting(bob, qwen):
    client = client_for(bob)
    start(client, qwen)
    fields = split_fields(prompt_tokens="8000", output_tokens="500", suggest_split="1")
    page = client.post("/deployments/new/placement/", fields).content.decode()
    advice = re.search(r'data-testid="split-advice" data-worth-it="(\w+)">(.*?)</div>\s*</div>', page, re.S)
    assert advice is not None, page[:4000]
    assert advice.group(1) == "no"
    assert "Disaggregation is not worth it here" in advice.group(2)
    assert "one NPU" in advice.group(2)
    assert not Deployment.objects.exists()  # advice only: the step stays


def test_the_planner_fills_the_roles_of_a_model_worth_splitting(bob, db):
    from tests.wizard_steps import SMALL_QWEN

    big = {**SMALL_QWEN, "params": 32_000_000_000, "weights_bytes": 64_000_000_000, "num_layers": 64,
           "hidden_size": 5120, "num_attention_heads": 40, "num_kv_heads": 8, "head_dim": 128}  # fmt: skip
    for name in ("a2-1", "a2-2"):
        a2_node(name, {"vllm-ascend": "0.13.0"})
    model = Model.objects.create(name="qwen-32b", facts=big)
    copy = ModelArtifact.objects.create(
        model=model, node=Node.objects.get(name="a2-1"), path="/m", ready=True
    )
    client = client_for(bob)
    start(client, copy, name="big")
    fields = split_fields(prefill_node="a2-1", decode_node="a2-2", prompt_tokens="16000", output_tokens="200",
                          suggest_split="1")  # fmt: skip
    page = client.post("/deployments/new/placement/", fields).content.decode()
    advice = re.search(r'data-testid="split-advice" data-worth-it="(\w+)">(.*?)</div>\s*</div>', page, re.S)
    assert advice is not None, page[:4000]
    shown = re.search(r'data-role="prefill">[^:]*: (\d+) × TP (\d+) · DP (\d+)', advice.group(2))
    assert shown is not None, advice.group(2)
    engines, tp, dp = (int(n) for n in shown.groups())
    assert re.search(rf'name="prefill_replicas" value="{engines}"', page)
    assert re.search(rf'name="prefill_npus" value="{tp * dp}"', page)
