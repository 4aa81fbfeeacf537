"""inspect_model describes generated and index-only model folders without loading weights."""

import json
import subprocess
import sys

import pytest

from workers.models.inspect import NotAModelError, inspect_model
from workers.models.safetensors_io import read_header, weight_files
from workers.models.tiny import make_tiny_model

INTERFACE_KEYS = {
    "architecture", "model_type", "params", "weights_bytes", "dtype", "hidden_size", "num_layers",
    "num_attention_heads", "num_kv_heads", "head_dim", "vocab_size", "max_position_embeddings", "moe", "mla",
    "quantization", "has_tokenizer", "has_chat_template",
}  # fmt: skip


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("inspect")
    return {
        arch: make_tiny_model(root / arch, arch=arch, shards=2) for arch in ("llama", "qwen2", "deepseek_v2")
    }


def exact_params(folder):
    return sum(info.numel for file in weight_files(folder) for info in read_header(file)[0])


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_it_describes_a_dense_model(models, arch):
    facts = inspect_model(models[arch])
    assert set(facts) >= INTERFACE_KEYS
    assert facts["model_type"] == arch
    assert facts["params"] == exact_params(models[arch])
    assert facts["weights_bytes"] == 2 * facts["params"]  # all BF16
    assert facts["bytes_by_dtype"] == {"BF16": facts["weights_bytes"]}
    assert (facts["hidden_size"], facts["num_layers"], facts["num_attention_heads"]) == (128, 2, 4)
    assert (facts["num_kv_heads"], facts["head_dim"], facts["vocab_size"]) == (2, 32, 512)
    assert facts["dtype"] == "bfloat16"
    assert facts["moe"] is None
    assert facts["mla"] is None
    assert facts["quantization"] is None
    assert facts["has_tokenizer"]
    assert facts["has_chat_template"]


def test_it_reports_moe_and_mla_for_deepseek_v2(models):
    facts = inspect_model(models["deepseek_v2"])
    assert facts["architecture"] == "DeepseekV2ForCausalLM"
    assert facts["moe"] == {"routed_experts": 4, "shared_experts": 1, "experts_per_token": 2}
    assert facts["mla"] == {
        "kv_lora_rank": 512,
        "q_lora_rank": None,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 32,
        "v_head_dim": 32,
    }
    assert facts["params"] == exact_params(models["deepseek_v2"])


def write_config_and_index(folder, config, total_size):
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    index = {"metadata": {"total_size": total_size}, "weight_map": {"x": "model-00001-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


def test_index_only_folder_gives_total_size_and_null_params(tmp_path):
    config = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "num_attention_heads": 128,
        "num_hidden_layers": 61,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "fp8", "fmt": "e4m3"},
    }
    write_config_and_index(tmp_path / "v3", config, 688_586_727_753)
    facts = inspect_model(tmp_path / "v3")
    assert facts["params"] is None
    assert facts["bytes_by_dtype"] is None
    assert facts["weights_bytes"] == 688_586_727_753
    assert facts["num_kv_heads"] == 128
    assert facts["head_dim"] == 192  # qk_nope_head_dim + qk_rope_head_dim, not 7168 / 128
    assert facts["moe"] == {"routed_experts": 256, "shared_experts": 1, "experts_per_token": 8}
    assert facts["mla"]["q_lora_rank"] == 1536
    assert facts["quantization"] == "fp8"
    assert not facts["has_tokenizer"]
    assert not facts["has_chat_template"]


def test_qwen3_moe_experts_come_from_num_experts(tmp_path):
    config = {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "num_experts": 128,
        "num_experts_per_tok": 8,
    }
    write_config_and_index(tmp_path / "q3", config, 61_000_000_000)
    facts = inspect_model(tmp_path / "q3")
    assert facts["moe"] == {"routed_experts": 128, "shared_experts": 0, "experts_per_token": 8}
    assert facts["head_dim"] == 128
    assert facts["num_kv_heads"] == 4
    assert facts["mla"] is None


def test_quant_description_wins_over_config(tmp_path, models):
    folder = tmp_path / "quantized"
    folder.mkdir()
    (folder / "config.json").write_text((models["llama"] / "config.json").read_text())
    (folder / "quant_model_description.json").write_text(json.dumps({"model_quant_type": "W8A8_DYNAMIC"}))
    assert inspect_model(folder)["quantization"] == "W8A8_DYNAMIC"


def test_chat_template_in_a_jinja_file_counts(tmp_path, models):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text((models["llama"] / "config.json").read_text())
    (folder / "tokenizer.json").write_text((models["llama"] / "tokenizer.json").read_text())
    (folder / "chat_template.jinja").write_text("{{ messages }}")
    facts = inspect_model(folder)
    assert facts["has_tokenizer"]
    assert facts["has_chat_template"]
    assert facts["weights_bytes"] is None


def test_a_folder_without_config_is_not_a_model(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(NotAModelError, match="config.json"):
        inspect_model(tmp_path)


def test_a_broken_config_is_not_a_model(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(NotAModelError, match="not valid JSON"):
        inspect_model(tmp_path)


def test_a_truncated_shard_is_reported(tmp_path, models):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text((models["llama"] / "config.json").read_text())
    (folder / "model.safetensors").write_bytes(b"\x01\x02")
    with pytest.raises(NotAModelError, match="model.safetensors"):
        inspect_model(folder)


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "workers.models.inspect", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_cli_prints_json_for_a_model(models):
    result = run_cli(models["qwen2"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["architecture"] == "Qwen2ForCausalLM"


def test_cli_exits_2_with_a_clear_error_for_a_non_model(tmp_path):
    result = run_cli(tmp_path)
    assert result.returncode == 2
    assert "no config.json" in result.stderr
    assert result.stdout == ""


def test_an_mla_head_is_its_nope_and_rope_parts_even_where_the_config_writes_the_rope_part_as_head_dim(
    tmp_path,
):
    # transformers saves DeepSeek configs with head_dim = qk_rope_head_dim (the rotary part only).
    config = {
        "architectures": ["DeepseekV2ForCausalLM"],
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_hidden_layers": 27,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "head_dim": 64,
    }
    write_config_and_index(tmp_path / "lite", config, 31_000_000_000)
    assert inspect_model(tmp_path / "lite")["head_dim"] == 192
