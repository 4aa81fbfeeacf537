"""The starter catalog loads, speaks inspect_model's shape and is internally consistent."""

import pytest

from workers.models.catalog import FACT_KEYS, CatalogError, find_model, load_catalog

EXPECTED_IDS = {
    "deepseek-v2-lite-chat",
    "deepseek-r1-distill-qwen-7b",
    "deepseek-r1-distill-qwen-32b",
    "qwen2.5-7b-instruct",
    "qwen2.5-72b-instruct",
    "qwen3-8b",
    "qwen3-32b",
    "deepseek-v3",
    "deepseek-r1-w8a8",
}


def test_it_lists_the_starter_models_with_every_inspect_fact():
    entries = load_catalog()
    assert {entry["id"] for entry in entries} == EXPECTED_IDS
    for entry in entries:
        assert set(FACT_KEYS) <= set(entry)
        assert entry["source"].startswith("https://")


@pytest.mark.parametrize("entry", load_catalog(), ids=lambda entry: entry["id"])
def test_entries_are_consistent(entry):
    assert entry["num_attention_heads"] % entry["num_kv_heads"] == 0
    assert entry["weights_bytes"] > 0
    if entry["moe"] is not None:
        assert entry["moe"]["experts_per_token"] <= entry["moe"]["routed_experts"]
    if entry["weights_bytes_source"].startswith("estimated") and entry["quantization"] is None:
        assert entry["weights_bytes"] == 2 * entry["params"]  # bfloat16


def test_deepseek_entries_carry_mla_and_the_w8a8_one_its_scheme():
    assert find_model("deepseek-ai/DeepSeek-V3")["mla"]["q_lora_rank"] == 1536
    assert find_model("deepseek-v2-lite-chat")["mla"]["q_lora_rank"] is None
    assert find_model("vllm-ascend/DeepSeek-R1-W8A8")["quantization"] == "W8A8_DYNAMIC"
    assert find_model("no/such-model") is None


def test_a_malformed_catalog_names_the_entry_and_field(tmp_path):
    path = tmp_path / "catalog.yaml"
    path.write_text("- id: broken\n  hub: {huggingface: a/b}\n")
    with pytest.raises(CatalogError, match="broken lacks source"):
        load_catalog(path)
