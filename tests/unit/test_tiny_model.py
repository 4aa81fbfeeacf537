"""The tiny-model generator writes folders that transformers/vLLM would accept: names, shapes, tokenizer."""

import json
import subprocess
import sys

import numpy as np
import pytest
from safetensors import safe_open
from tokenizers import Tokenizer

from workers.models.safetensors_io import read_header, weight_files
from workers.models.tiny import TinySpec, make_tiny_model, model_bytes


def tensors_of(folder):
    return {info.name: info for file in weight_files(folder) for info in read_header(file)[0]}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {arch: make_tiny_model(root / arch, arch=arch) for arch in ("llama", "qwen2", "deepseek_v2")}


@pytest.mark.parametrize("arch", ["llama", "qwen2", "deepseek_v2"])
def test_it_writes_every_file_a_server_needs(models, arch):
    names = {path.name for path in models[arch].iterdir()}
    assert {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"} <= names
    assert "model.safetensors" in names


def test_llama_shapes_follow_the_config(models):
    config = json.loads((models["llama"] / "config.json").read_text())
    tensors = tensors_of(models["llama"])
    hidden, head_dim = config["hidden_size"], config["head_dim"]
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert head_dim == 32
    assert hidden == config["num_attention_heads"] * head_dim
    layer = "model.layers.1"
    assert tensors[f"{layer}.self_attn.q_proj.weight"].shape == (hidden, hidden)
    assert tensors[f"{layer}.self_attn.k_proj.weight"].shape == (
        config["num_key_value_heads"] * head_dim,
        hidden,
    )
    assert tensors[f"{layer}.mlp.down_proj.weight"].shape == (hidden, config["intermediate_size"])
    assert tensors["lm_head.weight"].shape == (config["vocab_size"], hidden)
    assert not any(name.endswith(".bias") for name in tensors)
    assert {info.dtype for info in tensors.values()} == {"BF16"}


def test_qwen2_has_qkv_biases_only(models):
    tensors = tensors_of(models["qwen2"])
    biases = sorted(
        name.split(".")[-2] for name in tensors if name.endswith(".bias") and ".layers.0." in name
    )
    assert biases == ["k_proj", "q_proj", "v_proj"]


def test_deepseek_v2_has_mla_and_moe_tensors(models):
    config = json.loads((models["deepseek_v2"] / "config.json").read_text())
    tensors = tensors_of(models["deepseek_v2"])
    heads, hidden = config["num_attention_heads"], config["hidden_size"]
    attention = "model.layers.1.self_attn"
    rope, nope, v_dim = config["qk_rope_head_dim"], config["qk_nope_head_dim"], config["v_head_dim"]
    assert tensors[f"{attention}.q_proj.weight"].shape == (heads * (nope + rope), hidden)
    assert tensors[f"{attention}.kv_a_proj_with_mqa.weight"].shape == (config["kv_lora_rank"] + rope, hidden)
    assert tensors[f"{attention}.kv_b_proj.weight"].shape == (heads * (nope + v_dim), config["kv_lora_rank"])
    # Layer 0 is dense (first_k_dense_replace), layer 1 is MoE with a router, experts and shared experts.
    assert "model.layers.0.mlp.gate_proj.weight" in tensors
    assert tensors["model.layers.1.mlp.gate.weight"].shape == (config["n_routed_experts"], hidden)
    experts = {name.split(".")[5] for name in tensors if ".mlp.experts." in name}
    assert len(experts) == config["n_routed_experts"]
    assert tensors["model.layers.1.mlp.shared_experts.down_proj.weight"].shape == (
        hidden,
        config["moe_intermediate_size"] * config["n_shared_experts"],
    )


def test_deepseek_v2_with_q_lora_rank_uses_q_a_and_q_b(tmp_path):
    folder = make_tiny_model(tmp_path / "m", arch="deepseek_v2", q_lora_rank=48)
    tensors = tensors_of(folder)
    assert tensors["model.layers.0.self_attn.q_a_proj.weight"].shape == (48, 128)
    assert "model.layers.0.self_attn.q_proj.weight" not in tensors
    assert json.loads((folder / "config.json").read_text())["q_lora_rank"] == 48


def test_tied_model_has_no_lm_head(tmp_path):
    folder = make_tiny_model(tmp_path / "m", arch="qwen2", tied=True)
    assert "lm_head.weight" not in tensors_of(folder)
    assert json.loads((folder / "config.json").read_text())["tie_word_embeddings"] is True


def test_sharded_model_has_a_consistent_index(tmp_path):
    folder = make_tiny_model(tmp_path / "m", arch="llama", shards=3)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    tensors = tensors_of(folder)
    assert len(weight_files(folder)) == 3
    assert set(index["weight_map"]) == set(tensors)
    assert index["metadata"]["total_size"] == sum(info.nbytes for info in tensors.values())
    for name, file_name in index["weight_map"].items():
        assert name in {info.name for info in read_header(folder / file_name)[0]}


def test_float32_weights_open_with_the_safetensors_library(tmp_path):
    folder = make_tiny_model(tmp_path / "m", arch="llama", dtype="float32")
    with safe_open(str(folder / "model.safetensors"), framework="numpy") as handle:
        assert handle.metadata() == {"format": "pt"}
        norm = handle.get_tensor("model.norm.weight")
        embed = handle.get_tensor("model.embed_tokens.weight")
    assert np.all(norm == 1.0)
    assert embed.shape == (512, 128)
    assert 0.01 < embed.std() < 0.03


def test_tokenizer_round_trips_text_and_knows_its_special_tokens(models):
    folder = models["llama"]
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    config = json.loads((folder / "config.json").read_text())
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    generation = json.loads((folder / "generation_config.json").read_text())
    text = "Hello, Ascend! 你好 def f(x): return x"
    assert tokenizer.decode(tokenizer.encode(text).ids) == text
    assert tokenizer.get_vocab_size() <= config["vocab_size"]
    assert tokenizer.token_to_id(tokenizer_config["eos_token"]) == config["eos_token_id"]
    assert tokenizer.token_to_id("<|im_end|>") in generation["eos_token_id"]
    assert "<|im_start|>" in tokenizer_config["chat_template"]


def test_target_size_grows_the_model_to_about_that_size(tmp_path):
    folder = make_tiny_model(tmp_path / "m", arch="llama", target_mb=12)
    total = sum(info.nbytes for info in tensors_of(folder).values())
    assert 0.85 * 12 * 2**20 < total < 1.15 * 12 * 2**20
    assert total == model_bytes(TinySpec(**_spec_fields(folder)))


def _spec_fields(folder):
    config = json.loads((folder / "config.json").read_text())
    return {"layers": config["num_hidden_layers"], "intermediate": config["intermediate_size"]}


def test_it_refuses_a_head_size_vllm_cpu_cannot_run(tmp_path):
    with pytest.raises(ValueError, match="head size"):
        make_tiny_model(tmp_path / "m", hidden=100, heads=4)


def test_deepseek_v2_keeps_the_latent_width_vllm_cpu_mla_runs(models, tmp_path):
    config = json.loads((models["deepseek_v2"] / "config.json").read_text())
    assert config["kv_lora_rank"] + config["qk_rope_head_dim"] == 576
    with pytest.raises(ValueError, match="latent width"):
        make_tiny_model(tmp_path / "m", arch="deepseek_v2", kv_lora_rank=64, qk_rope_head_dim=32)


def test_cli_writes_a_model_and_exits_2_on_bad_sizes(tmp_path):
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "workers.models.tiny",
            str(tmp_path / "m"),
            "--arch",
            "qwen2",
            "--shards",
            "2",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert len(weight_files(tmp_path / "m")) == 2
    bad = subprocess.run(
        [sys.executable, "-m", "workers.models.tiny", str(tmp_path / "x"), "--hidden", "96"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2
    assert "head size" in bad.stderr
