"""W8A8_DYNAMIC output matches what vllm-ascend loads, tensor by tensor, within int8 error bounds."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from workers.models import quantize_blocks, w8a8
from workers.models.model_folder import BadSourceError
from workers.models.quantize import quantize_w8a8_dynamic
from workers.models.safetensors_io import (
    bf16_bits_to_float32,
    float32_to_bf16_bits,
    read_header,
    read_tensor,
    to_float32,
    weight_files,
)
from workers.models.tiny import make_tiny_model
from workers.models.w8a8 import is_quantized_linear, quantize_block, row_abs_max

ERROR_BOUND = 1 / 254 + 1e-6


def load_all(folder):
    """name -> (dtype, array in storage dtype); fine for tiny test models."""
    tensors = {}
    for file in weight_files(folder):
        with file.open("rb") as handle:
            for info in read_header(file)[0]:
                tensors[info.name] = (info.dtype, read_tensor(handle, info))
    return tensors


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    root = tmp_path_factory.mktemp("quant")
    result = {}
    for arch, extra in (("llama", {}), ("qwen2", {}), ("deepseek_v2", {"q_lora_rank": 48})):
        source = make_tiny_model(root / f"{arch}-src", arch=arch, shards=2, **extra)
        calls: list[float] = []
        report = quantize_w8a8_dynamic(
            source, root / arch, on_progress=lambda pct, _stage, c=calls: c.append(pct)
        )
        result[arch] = (source, root / arch, report, calls)
    return result


@pytest.mark.parametrize("arch", ["llama", "qwen2", "deepseek_v2"])
def test_every_decoder_linear_becomes_int8_with_row_scales(quantized, arch):
    source, output, _, _ = quantized[arch]
    before, after = load_all(source), load_all(output)
    for name, (dtype, original) in before.items():
        if is_quantized_linear(name, original.shape):
            module = name.removesuffix(".weight")
            weight_dtype, weight = after[name]
            scale_dtype, scale = after[f"{module}.weight_scale"]
            offset_dtype, offset = after[f"{module}.weight_offset"]
            assert (weight_dtype, scale_dtype, offset_dtype) == ("I8", "F32", "F32")
            assert weight.shape == original.shape
            assert scale.shape == offset.shape == (original.shape[0], 1)
            assert weight.min() >= -127
            assert weight.max() <= 127
            assert not offset.any()
            values = to_float32(original, dtype)
            row_max = np.abs(values).max(axis=1, keepdims=True)
            np.testing.assert_allclose(scale, row_max / 127, rtol=1e-6)
            error = np.abs(weight.astype(np.float32) * scale - values) / row_max
            assert error.max() <= ERROR_BOUND
        else:
            # Embeddings, norms, lm_head, routers and biases are untouched, byte for byte.
            assert after[name][0] == dtype
            assert np.array_equal(after[name][1], original)


def test_what_stays_float_and_what_is_quantized(quantized):
    description = json.loads((quantized["deepseek_v2"][1] / "quant_model_description.json").read_text())
    assert description["model.layers.1.mlp.gate.weight"] == "FLOAT"  # MoE router
    assert description["model.embed_tokens.weight"] == "FLOAT"
    assert description["lm_head.weight"] == "FLOAT"
    assert description["model.layers.0.self_attn.q_a_layernorm.weight"] == "FLOAT"
    for projection in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"):
        assert description[f"model.layers.0.self_attn.{projection}.weight"] == "W8A8_DYNAMIC"
    assert description["model.layers.1.mlp.experts.3.down_proj.weight_scale"] == "W8A8_DYNAMIC"
    assert description["model.layers.1.mlp.shared_experts.up_proj.weight_offset"] == "W8A8_DYNAMIC"
    qwen = json.loads((quantized["qwen2"][1] / "quant_model_description.json").read_text())
    assert qwen["model.layers.0.self_attn.q_proj.bias"] == "FLOAT"


@pytest.mark.parametrize("arch", ["llama", "qwen2", "deepseek_v2"])
def test_description_names_every_tensor_and_the_scheme(quantized, arch):
    _, output, _, _ = quantized[arch]
    description = json.loads((output / "quant_model_description.json").read_text())
    assert description.pop("model_quant_type") == "W8A8_DYNAMIC"
    assert description.pop("version") == "1.0.0"
    assert set(description) == set(load_all(output))
    assert set(description.values()) == {"W8A8_DYNAMIC", "FLOAT"}


@pytest.mark.parametrize("arch", ["llama", "qwen2", "deepseek_v2"])
def test_fused_shards_share_one_type(quantized, arch):
    description = json.loads((quantized[arch][1] / "quant_model_description.json").read_text())
    for layer in (0, 1):
        prefix = f"model.layers.{layer}"
        groups = [[f"{prefix}.mlp.experts.0.{p}_proj.weight" for p in ("gate", "up")]]
        if f"{prefix}.mlp.gate_proj.weight" in description:
            groups.append([f"{prefix}.mlp.{p}_proj.weight" for p in ("gate", "up")])
        if arch != "deepseek_v2":
            groups.append([f"{prefix}.self_attn.{p}_proj.weight" for p in ("q", "k", "v")])
        for group in groups:
            present = [description[name] for name in group if name in description]
            assert len(set(present)) <= 1


@pytest.mark.parametrize("arch", ["llama", "qwen2", "deepseek_v2"])
def test_output_folder_is_servable(quantized, arch):
    source, output, report, calls = quantized[arch]
    names = {path.name for path in output.iterdir()}
    assert {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "config.json"} <= names
    assert names & {"model.safetensors", "model.safetensors.index.json"} == set()
    index = json.loads((output / "quant_model_weights.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == {p.name for p in weight_files(output)}
    assert all(name.startswith("quant_model_weights") for name in index["weight_map"].values())
    assert "quantization_config" not in json.loads((output / "config.json").read_text())
    assert not output.with_name(output.name + ".tmp").exists()
    assert report["max_relative_error"] <= ERROR_BOUND
    assert set(report["relative_error_by_tensor"]) == {
        name for name, (_, array) in load_all(source).items() if is_quantized_linear(name, array.shape)
    }
    assert calls == sorted(calls)
    assert calls[-1] == 100.0


def test_a_source_quantization_config_is_dropped(tmp_path):
    source = make_tiny_model(tmp_path / "src", arch="llama")
    config = json.loads((source / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8"}
    (source / "config.json").write_text(json.dumps(config))
    quantize_w8a8_dynamic(source, tmp_path / "out")
    assert "quantization_config" not in json.loads((tmp_path / "out" / "config.json").read_text())


def test_tied_head_is_still_described_as_float(tmp_path):
    source = make_tiny_model(tmp_path / "src", arch="qwen2", tied=True)
    quantize_w8a8_dynamic(source, tmp_path / "out")
    description = json.loads((tmp_path / "out" / "quant_model_description.json").read_text())
    assert description["lm_head.weight"] == "FLOAT"


def test_zero_rows_quantize_to_zero_without_dividing_by_zero():
    block = np.zeros((3, 8), dtype=np.float32)
    block[1] = np.linspace(-2, 2, 8)
    quantized, scale, error = quantize_block(block, "F32")
    assert not quantized[0].any()
    assert scale[0] == 0
    assert quantized[1].min() == -127
    assert quantized[1].max() == 127
    assert error <= ERROR_BOUND


def test_it_refuses_an_already_quantized_source(quantized, tmp_path):
    with pytest.raises(BadSourceError, match="already quantized"):
        quantize_w8a8_dynamic(quantized["llama"][1], tmp_path / "again")


def test_it_refuses_a_taken_destination(quantized):
    source, output, _, _ = quantized["llama"]
    with pytest.raises(BadSourceError, match="not empty"):
        quantize_w8a8_dynamic(source, output)


def test_cli_reports_progress_and_exits_2_on_a_bad_source(tmp_path):
    source = make_tiny_model(tmp_path / "src", arch="llama")
    command = [sys.executable, "-m", "workers.models.quantize", "--scheme", "w8a8_dynamic"]
    good = subprocess.run(
        [*command, str(source), str(tmp_path / "out")], capture_output=True, text=True, check=False
    )
    assert good.returncode == 0, good.stderr
    progress = [line.split() for line in good.stderr.splitlines() if line.startswith("progress ")]
    assert progress[-1][1] == "100.0"
    assert any(fields[2] == "model.layers.0.self_attn.q_proj.weight" for fields in progress)
    assert json.loads(good.stdout)["tensors_quantized"] == 14
    (tmp_path / "empty").mkdir()
    bad = subprocess.run(
        [*command, str(tmp_path / "empty"), str(tmp_path / "o2")], capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2
    assert "config.json" in bad.stderr
    assert not (tmp_path / "o2").exists()
    assert not (tmp_path / "o2.tmp").exists()


# VmHWM (peak RSS) starts afresh at exec; ru_maxrss would inherit the pytest process's high-water mark
# and could hide the growth this test is about.
MEMORY_PROBE = """
import json, re, resource, sys
from workers.models.quantize import quantize_w8a8_dynamic
def high_water_kb():
    with open("/proc/self/status") as status:
        return int(re.search(r"VmHWM:\\s+(\\d+)", status.read()).group(1))
before = high_water_kb()
report = quantize_w8a8_dynamic(sys.argv[1], sys.argv[2])
# Forked workers count too: each at the largest peak among them, less what it shares with this process.
workers_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
growth_kb = high_water_kb() - before + (report["processes"] - 1) * max(0, workers_kb - before)
print(json.dumps({"growth_kb": growth_kb, "processes": report["processes"]}))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="peak RSS is read from Linux /proc")
def test_memory_stays_bounded_by_the_largest_shard_not_the_model(tmp_path):
    source = make_tiny_model(tmp_path / "big", arch="llama", target_mb=96, shards=4)
    model_bytes = sum(path.stat().st_size for path in weight_files(source))
    largest_shard = max(path.stat().st_size for path in weight_files(source))
    result = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, str(source), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=True,
    )
    measured = json.loads(result.stdout)
    assert measured["processes"] > 1 or (os.cpu_count() or 1) == 1
    growth = measured["growth_kb"] * 1024
    allowance = 16 * 2**20
    assert growth < 2 * largest_shard + allowance
    assert growth < model_bytes / 2


@pytest.mark.parametrize("sign", ["mixed", "positive", "negative"])
def test_bf16_row_max_from_bit_patterns_matches_float_math(sign):
    values = np.random.default_rng(3).standard_normal((40, 24), dtype=np.float32)
    if sign != "mixed":
        values = np.abs(values) if sign == "positive" else -np.abs(values)
    bits = float32_to_bf16_bits(values)
    expected = np.abs(bf16_bits_to_float32(bits)).max(axis=1)
    assert np.array_equal(row_abs_max(bits, "BF16"), expected)


def test_a_nan_weight_is_refused():
    bits = float32_to_bf16_bits(np.array([[1.0, np.nan]], dtype=np.float32))
    with pytest.raises(ValueError, match="NaN"):
        quantize_block(bits, "BF16")


def test_blocks_of_many_tensors_in_flight_come_out_as_whole_tensors_would(tmp_path, monkeypatch):
    # Tiny blocks make every weight span many blocks, with blocks of neighbouring tensors in flight at once.
    source = make_tiny_model(tmp_path / "src", arch="llama", shards=2)
    monkeypatch.setattr(quantize_blocks, "BLOCK_BYTES", 512)
    report = quantize_w8a8_dynamic(source, tmp_path / "out")
    before, after = load_all(source), load_all(tmp_path / "out")
    worst = 0.0
    for name, (dtype, original) in before.items():
        if is_quantized_linear(name, original.shape):
            expected, scale, error = quantize_block(original, dtype)
            assert np.array_equal(after[name][1], expected)
            assert np.array_equal(after[name.replace(".weight", ".weight_scale")][1], scale.reshape(-1, 1))
            assert report["relative_error_by_tensor"][name] == error
            worst = max(worst, error)
        else:
            assert np.array_equal(after[name][1], original)
    assert report["max_relative_error"] == worst > 0


def test_slicing_a_block_for_the_cache_does_not_change_the_result(monkeypatch):
    values = np.random.default_rng(5).standard_normal((37, 64), dtype=np.float32)
    bits = float32_to_bf16_bits(values * np.linspace(0.01, 3, 37, dtype=np.float32)[:, None])
    whole = quantize_block(bits, "BF16")
    monkeypatch.setattr(w8a8, "SLICE_ELEMENTS", 3 * 64)
    sliced = quantize_block(bits, "BF16")
    assert np.array_equal(whole[0], sliced[0])
    assert np.array_equal(whole[1], sliced[1])
    assert whole[2] == sliced[2]


def test_worker_processes_write_the_same_bytes_as_one_process(tmp_path, monkeypatch):
    # Small blocks give every weight several blocks, so the processes interleave within tensors and shards.
    source = make_tiny_model(tmp_path / "src", arch="deepseek_v2", shards=3, q_lora_rank=48)
    monkeypatch.setattr(quantize_blocks, "BLOCK_BYTES", 1024)
    alone = quantize_w8a8_dynamic(source, tmp_path / "alone", processes=1)
    forked = quantize_w8a8_dynamic(source, tmp_path / "forked", processes=3)
    assert (alone["processes"], forked["processes"]) == (1, 3)
    assert alone["relative_error_by_tensor"] == forked["relative_error_by_tensor"]
    files = sorted(path.relative_to(tmp_path / "alone") for path in (tmp_path / "alone").rglob("*"))
    assert files == sorted(path.relative_to(tmp_path / "forked") for path in (tmp_path / "forked").rglob("*"))
    assert any(path.suffix == ".safetensors" for path in files)
    for path in files:
        if (tmp_path / "alone" / path).is_file():
            assert (tmp_path / "alone" / path).read_bytes() == (tmp_path / "forked" / path).read_bytes(), path


@pytest.mark.parametrize("processes", [1, 2])
def test_a_nan_in_a_weight_names_the_tensor_and_leaves_no_output(tmp_path, processes):
    source = make_tiny_model(tmp_path / "src", arch="llama", shards=2)
    shard = weight_files(source)[-1]
    damaged = next(info for info in read_header(shard)[0] if is_quantized_linear(info.name, info.shape))
    with shard.open("r+b") as handle:
        handle.seek(damaged.begin + damaged.nbytes // 2)
        handle.write(float32_to_bf16_bits(np.array([np.nan], dtype=np.float32)).tobytes())
    with pytest.raises(BadSourceError, match=re.escape(damaged.name)):
        quantize_w8a8_dynamic(source, tmp_path / "out", processes=processes)
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "out.tmp").exists()
