"""Serving recipes and the planner's serving advice in the catalog: GET /api/v1/recipes/ (search, kind of
node), the recipes page, GET /api/v1/models/{id}/advice/ (what would fit, the P:D split) and the model
page's serving card, in both languages."""

import pytest
from django.test import Client

from panel.catalog.models import Model, ModelArtifact
from tests.conftest import api_client_for
from tests.deployment_helpers import deployment_body
from tests.planner_inputs import DEEPSEEK_R1, QWEN25_7B, QWEN25_72B

pytestmark = pytest.mark.django_db


@pytest.fixture
def deepseek(db):
    return Model.objects.create(name="deepseek-r1", source="local", facts={**DEEPSEEK_R1, "mtp_layers": 1})


def page(user, url, language="en"):
    client = Client()
    client.force_login(user)
    client.cookies["django_language"] = language
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def test_recipes_are_searched_by_words_and_kind_of_node(charlie):
    client = api_client_for(charlie)
    every = client.get("/api/v1/recipes/").json()
    assert every["count"] == len(every["results"]) >= 5
    assert {shape["id"] for shape in every["hardware"]} == {"a2", "a3", "300i-duo"}
    a3 = client.get("/api/v1/recipes/", {"search": "DeepSeek", "hardware": "a3"}).json()
    assert [r["id"] for r in a3["results"]] == ["a3-deepseek-w8a8", "a3-deepseek-pd-2p1d"]
    pd = client.get("/api/v1/recipes/", {"search": "mooncake decode"}).json()["results"]
    assert [r["id"] for r in pd] == ["a3-deepseek-pd-2p1d"]
    assert pd[0]["topology"]["decode"] == {
        "replicas": 1,
        "nodes": 2,
        "tensor_parallel_size": 1,
        "data_parallel_size": 32,
        "expert_parallel": True,
    }
    duo = client.get("/api/v1/recipes/", {"hardware": "300i-duo"}).json()["results"]
    assert "--load-format sharded_state" in duo[0]["flags"]
    assert client.get("/api/v1/recipes/", {"search": "no-such-recipe"}).json()["count"] == 0


def test_a_bad_kind_of_node_or_an_undocumented_parameter_is_refused(charlie):
    client = api_client_for(charlie)
    assert client.get("/api/v1/recipes/", {"hardware": "h100"}).status_code == 400
    assert client.get("/api/v1/recipes/", {"q": "deepseek"}).status_code == 400


def test_the_recipes_page_searches_and_reads_in_both_languages(charlie):
    html = page(charlie, "/models/recipes/?search=w8a8sc")
    assert 'data-recipe="300i-duo-qwen3-w8a8sc"' in html
    assert 'data-recipe="a3-deepseek-w8a8"' not in html
    assert "Qwen3 dense 8B / 14B / 32B · W8A8SC on Atlas 300I Duo" in html
    zh = page(charlie, "/models/recipes/?search=w8a8sc", "zh-hans")
    assert "服务配方" in zh
    assert "在 Atlas 300I Duo 上" in zh
    assert "No recipe holds every word" in page(charlie, "/models/recipes/?search=nothing-here")


def test_the_advice_says_what_would_fit_deepseek_r1_and_the_split(charlie, deepseek):
    client = api_client_for(charlie)
    one_a2 = client.get("/api/v1/models/deepseek-r1/advice/", {"hardware": "a2"}).json()
    assert one_a2["plan"]["fits"] is False
    proposals = {(p["hardware"], p["weights_label"]): p for p in one_a2["proposals"]}
    two_a2 = proposals[("", "W8A8")]
    assert (two_a2["nodes"], two_a2["npus"], two_a2["expert_parallel_size"]) == (2, 16, 16)
    assert two_a2["reason"]["code"] == "proposal_here"
    assert proposals[("a3", "W8A8")]["nodes"] == 1
    assert "a3-deepseek-w8a8" in one_a2["recipes"]
    query = {
        "hardware": "a3",
        "nodes": 4,
        "quantization": "ascend",
        "prompt_tokens": 4096,
        "output_tokens": 1024,
        "vllm_ascend": "0.23.0",
    }
    four_a3 = client.get("/api/v1/models/deepseek-r1/advice/", query).json()
    assert four_a3["plan"]["fits"] is True
    assert four_a3["proposals"] == []
    pd = four_a3["pd"]
    assert pd["worth_it"] is True
    assert pd["prefill"]["expert_parallel_size"] == 16
    assert pd["decode"]["eplb"] is True
    assert pd["reasons"][0]["code"] == "pd_split"


def test_advice_refuses_half_a_workload_and_a_model_without_facts(charlie, deepseek):
    client = api_client_for(charlie)
    half = client.get("/api/v1/models/deepseek-r1/advice/", {"prompt_tokens": 4096})
    assert half.status_code == 400
    assert "output_tokens" in half.json()["errors"] or "output_tokens" in str(half.json())
    Model.objects.create(name="bare", source="local")
    assert client.get("/api/v1/models/bare/advice/").status_code == 400


def test_the_model_page_shows_the_proposals_and_why_a_small_model_is_not_disaggregated(charlie, deepseek):
    html = page(charlie, f"/models/{deepseek.pk}/")
    assert 'data-testid="fit-proposal"' in html
    assert 'data-testid="proposals"' in html
    assert "Fits 2 node(s) of 8 NPUs like these (16 NPUs)" in html
    zh = page(charlie, f"/models/{deepseek.pk}/", "zh-hans")
    assert "可放入" in zh
    qwen = Model.objects.create(name="qwen2.5-7b", source="local", facts=QWEN25_7B)
    asked = f"/models/{qwen.pk}/?hardware=a2&nodes=2&prompt_tokens=2048&output_tokens=512"
    html = page(charlie, asked)
    assert "Disaggregation is not worth it here" in html
    assert "The model fits one NPU (14.2 GiB of BF16 weights)" in html
    zh = page(charlie, asked, "zh-hans")
    assert "不值得" in zh
    assert "The model fits one NPU" not in zh


def test_the_dry_run_refusing_a_model_too_big_says_what_would_fit(bob, a2):
    # Qwen2.5-72B in BF16 (135 GiB) on sim-a2's two 64 GiB NPUs: no TP fits; as W8A8 it fits these two.
    model = Model.objects.create(name="qwen2.5-72b", source="local", facts=QWEN25_72B)
    copy = ModelArtifact.objects.create(model=model, node=a2, path="/models/q72", ready=True)
    body = deployment_body((model, copy), nodes=[{"node": "sim-a2", "npus": [0, 1]}])
    response = api_client_for(bob).post("/api/v1/deployments/plan/", body, format="json")
    assert response.status_code == 400
    said = response.json()["errors"]["nodes"]
    here = "Fits 1 node(s) of 2 NPUs like these (2 NPUs) as TP 2 x DP 1 x EP 1 with W8A8 weights"
    assert any(text.startswith(here) for text in said), said
    assert any(text.startswith("Fits 1 x Atlas 800I A3") for text in said), said


def test_the_model_page_plans_the_split_with_eplb_for_the_version_given(charlie, deepseek):
    asked = (
        f"/models/{deepseek.pk}/?hardware=a3&nodes=4&quantization=ascend&prompt_tokens=4096"
        "&output_tokens=1024&vllm_ascend=0.23.0"
    )
    html = page(charlie, asked)
    assert "Disaggregation is worth it here" in html
    assert "The decode instances run EPLB with" in html
    assert "Disaggregate as 1 prefill (TP 4 x DP 4 x EP 16, 16 NPUs each)" in html
    assert 'value="0.23.0"' in html
    zh = page(charlie, asked, "zh-hans")
    assert "此处值得进行预填充/解码分离" in zh
    assert "解码实例按此 vllm-ascend 版本的建议运行 EPLB" in zh


def test_the_advice_plans_on_the_free_npus_of_named_nodes(charlie, a2):
    # sim-a2 offers two free 64 GiB 910B NPUs: Qwen2.5-72B in BF16 needs four, as W8A8 it fits these two.
    Model.objects.create(name="qwen2.5-72b", source="local", facts=QWEN25_72B)
    client = api_client_for(charlie)
    answer = client.get("/api/v1/models/qwen2.5-72b/advice/", {"node": "sim-a2"}).json()
    assert (answer["hardware"], answer["hardware_title"], answer["nodes"]) == ("offer", "sim-a2", 1)
    assert answer["plan"]["fits"] is False
    here = next(p for p in answer["proposals"] if p["hardware"] == "")
    assert (here["npus_per_node"], here["npus"], here["weights_label"]) == (2, 2, "W8A8")
    unknown = client.get("/api/v1/models/qwen2.5-72b/advice/", {"node": "nowhere"})
    assert unknown.status_code == 400
    assert "No node named nowhere." in str(unknown.json())
    qwen = Model.objects.create(name="qwen2.5-7b", source="local", facts=QWEN25_7B)
    html = page(charlie, f"/models/{qwen.pk}/?node=sim-a2&prompt_tokens=4096&output_tokens=256")
    assert 'option value="sim-a2" selected' in html
    assert "All 2 NPUs are on one node" in html
