"""FP32 -> BF16/FP16 conversion keeps names and shapes and round-trips within half-precision error."""

import json

import numpy as np
import pytest

from workers.models.convert import convert_dtype, main
from workers.models.inspect import inspect_model
from workers.models.model_folder import BadSourceError
from workers.models.safetensors_io import (
    bf16_bits_to_float32,
    float32_to_bf16_bits,
    read_header,
    read_tensor,
    to_float32,
    weight_files,
)
from workers.models.tiny import make_tiny_model


def load_all(folder):
    tensors = {}
    for file in weight_files(folder):
        with file.open("rb") as handle:
            for info in read_header(file)[0]:
                tensors[info.name] = (info.dtype, read_tensor(handle, info))
    return tensors


@pytest.fixture(scope="module")
def fp32_model(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("fp32") / "m", arch="qwen2", dtype="float32", shards=2)


@pytest.mark.parametrize(
    ("dtype", "st_dtype", "tolerance"), [("bfloat16", "BF16", 2**-8), ("float16", "F16", 2**-11)]
)
def test_round_trip_stays_within_half_precision(fp32_model, tmp_path, dtype, st_dtype, tolerance):
    report = convert_dtype(fp32_model, tmp_path / "out", dtype)
    before, after = load_all(fp32_model), load_all(tmp_path / "out")
    assert set(after) == set(before)
    assert report["tensors_converted"] == len(before)
    for name, (_, original) in before.items():
        converted_dtype, converted = after[name]
        assert converted_dtype == st_dtype
        assert converted.shape == original.shape
        np.testing.assert_allclose(to_float32(converted, st_dtype), original, rtol=tolerance, atol=1e-7)
    facts = inspect_model(tmp_path / "out")
    assert facts["dtype"] == dtype
    assert facts["weights_bytes"] == inspect_model(fp32_model)["weights_bytes"] // 2
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == facts["weights_bytes"]


def test_bf16_rounding_is_to_nearest_even_and_keeps_specials():
    values = np.array([1.0, -2.5, 1 + 2**-8, 1 + 3 * 2**-8, np.inf, -np.inf, np.nan, 0.0], dtype=np.float32)
    back = bf16_bits_to_float32(float32_to_bf16_bits(values))
    # 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
    assert back[:4].tolist() == [1.0, -2.5, 1.0, 1 + 2**-6]
    assert back[4] == np.inf
    assert back[5] == -np.inf
    assert np.isnan(back[6])
    assert back[7] == 0.0


def test_float16_overflow_is_refused_and_leaves_nothing(tmp_path):
    source = make_tiny_model(tmp_path / "src", arch="llama", dtype="float32")
    header = read_header(source / "model.safetensors")[0]
    embed = next(info for info in header if info.name == "model.embed_tokens.weight")
    with (source / "model.safetensors").open("r+b") as handle:
        handle.seek(embed.begin)
        handle.write(np.float32(1e6).tobytes())
    with pytest.raises(BadSourceError, match="bfloat16"):
        convert_dtype(source, tmp_path / "out", "float16")
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "out.tmp").exists()


def test_cli_exits_2_on_a_folder_without_weights(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    assert main(["--dtype", "bfloat16", str(tmp_path), str(tmp_path / "out")]) == 2
    assert "no *.safetensors" in capsys.readouterr().err
