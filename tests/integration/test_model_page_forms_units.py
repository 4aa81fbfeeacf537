"""The model and node pages a newcomer reads: every field of the model page's download and per-copy forms has
a label whose `for` names that field (one id per field on the page, though each copy has its own forms),
sizes and memory are in binary units (GiB, MiB, KiB: the way npu-smi and the planner count), and the
planner's reason a model does not fit reads in 简体中文 like the rest of the page."""

import re
from html.parser import HTMLParser

import pytest
from django.test import Client

from panel.catalog.models import Model, ModelArtifact
from panel.nodes.models import Node

pytestmark = pytest.mark.django_db

# DeepSeek-V3 in FP8: 671 B parameters, some 641 GiB of weights, more than one node of 8 × 64 GiB holds.
DEEPSEEK_V3 = {
    "architecture": "DeepseekV3ForCausalLM",
    "model_type": "deepseek_v3",
    "params": 671_000_000_000,
    "weights_bytes": 688_586_727_753,
    "dtype": "bfloat16",
    "hidden_size": 7168,
    "num_layers": 61,
    "num_attention_heads": 128,
    "num_kv_heads": 128,
    "head_dim": 192,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "moe": {"routed_experts": 256, "shared_experts": 1, "experts_per_token": 8},
    "mla": {"kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
            "v_head_dim": 128},
    "quantization": "fp8",
}  # fmt: skip


class Forms(HTMLParser):
    """Per form: the ids of its fields (those without an aria-label of their own) and the `for` of its labels;
    and every id on the page."""

    def __init__(self):
        super().__init__()
        self.forms: list[dict] = []
        self.ids: list[str] = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if attributes.get("id"):
            self.ids.append(attributes["id"])
        if tag == "form":
            self.forms.append({"testid": attributes.get("data-testid"), "fields": [], "labels": []})
        elif self.forms and tag in ("input", "select", "textarea"):
            if attributes.get("type") not in ("hidden", "submit", "button") and not attributes.get(
                "aria-label"
            ):
                self.forms[-1]["fields"].append(attributes.get("id"))
        elif self.forms and tag == "label":
            self.forms[-1]["labels"].append(attributes.get("for"))


@pytest.fixture
def model_with_two_copies(db):
    model = Model.objects.create(name="deepseek-v3", source="modelscope", repo_id="deepseek-ai/DeepSeek-V3",
                                 facts=DEEPSEEK_V3)  # fmt: skip
    for name in ("a2-1", "a2-2"):
        node = Node.objects.create(name=name, address="127.0.0.1")
        ModelArtifact.objects.create(model=model, node=node, path=f"/data/models/{name}", ready=True,
                                     format="hf", size_bytes=688_586_727_753)  # fmt: skip
    return model


def page(user, model, language="en"):
    client = Client()
    client.force_login(user)
    client.cookies["django_language"] = language
    return client.get(f"/models/{model.pk}/").content.decode()


def test_every_field_of_the_download_and_copy_forms_has_its_own_label(model_with_two_copies, alice):
    parsed = Forms()
    parsed.feed(page(alice, model_with_two_copies))

    forms = [form for form in parsed.forms if form["fields"]]
    assert {form["testid"] for form in forms} >= {"download-form", "convert-form"}
    assert sum(form["testid"] == "convert-form" for form in forms) == 2  # one per copy
    for form in forms:
        assert None not in form["fields"], form
        assert sorted(form["fields"]) == sorted(set(form["labels"]) & set(form["fields"])), form
    duplicated = sorted({i for i in parsed.ids if parsed.ids.count(i) > 1})
    assert not duplicated, duplicated


def test_sizes_on_the_model_page_are_binary(model_with_two_copies, alice):
    html = page(alice, model_with_two_copies)

    assert "641.3 GiB" in html  # the weights and each copy: 688,586,727,753 bytes
    assert not re.search(r"\d GB\b", html)


def test_the_reason_a_model_does_not_fit_reads_in_chinese(model_with_two_copies, alice):
    english = re.search(
        r'data-testid="fit">.*?<span class="muted">(.*?)</span>', page(alice, model_with_two_copies)
    )
    chinese = re.search(r'data-testid="fit">.*?<span class="muted">(.*?)</span>',
                        page(alice, model_with_two_copies, "zh-hans"))  # fmt: skip

    assert english
    assert english.group(1).strip()
    assert chinese.group(1) != english.group(1)
    assert re.search(r"[\u4e00-\u9fff]", chinese.group(1)), chinese.group(1)


def test_the_node_page_labels_npu_memory_and_page_sizes_in_binary_units(alice):
    node = Node.objects.create(name="units-node", address="127.0.0.1")
    client = Client()
    client.force_login(alice)

    html = client.get(f"/nodes/{node.name}/").content.decode()

    assert "Memory (MiB)" in html
    assert "(MB)" not in html
    assert "(kB)" not in html
