"""The sim host's atc and msmodelslim, run as processes the way the agent runs them, and the minimal ONNX
reader/writer behind atc checked against the real `onnx` package."""

import json
import os
import subprocess
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from workers.models.onnx_file import NotOnnxError, parse_model, tiny_vision_model, write_tiny_vision_model
from workers.models.tiny import make_tiny_model
from workers.sim.atc import OM_MAGIC
from workers.sim.installers import make_sim_package
from workers.sim.tree import create_host

FAST = {"ASCEND_PANEL_SIM_ATC_STEP_SECONDS": "0"}
SET_ENV = "usr/local/Ascend/ascend-toolkit/set_env.sh"


def sim(tmp_path: Path, profile: str, **kwargs) -> Path:
    root = tmp_path / profile
    create_host(root, profile, **kwargs)
    return root


def sourced(root: Path, *command: str) -> subprocess.CompletedProcess:
    """`command` after sourcing the toolkit's set_env.sh, as the agent's ATC task runs it."""
    script = 'source "$1"; shift; exec "$@"'
    return subprocess.run(
        ["bash", "-c", script, "atc-test", str(root / SET_ENV), *command],
        capture_output=True,
        text=True,
        env={**os.environ, **FAST, "PATH": f"{root / 'bin'}:{os.environ['PATH']}"},
        timeout=60,
        check=False,
    )


def atc(root: Path, model: Path, *extra: str, soc: str = "Ascend910B3") -> subprocess.CompletedProcess:
    output = f"--output={root / 'out' / 'model'}"
    return sourced(root, "atc", f"--model={model}", "--framework=5", output, f"--soc_version={soc}", *extra)


def helper_model(path: Path) -> Path:
    """A model made by onnx's own helper API: a dynamic batch, two inputs, a weight listed as an input."""
    weight = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 1, 1], [0.1] * 12)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["pixels", "w"], ["conv"]),
            helper.make_node("Mul", ["conv", "scale"], ["out"]),
        ],
        "helper_graph",
        [
            helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["batch", 3, 16, 16]),
            helper.make_tensor_value_info("scale", TensorProto.FLOAT, [1]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3, 1, 1]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 4, 16, 16])],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


# --- the ONNX reader and writer ----------------------------------------------------------------------


def test_the_reader_reads_what_the_onnx_helper_api_writes(tmp_path):
    model = parse_model(helper_model(tmp_path / "m.onnx").read_bytes())
    assert [(i.name, i.dims) for i in model.inputs] == [("pixels", ("batch", 3, 16, 16)), ("scale", (1,))]
    assert model.op_types == ("Conv", "Mul")
    assert model.outputs == ("out",)
    assert model.opset == 17


def test_the_tiny_vision_model_passes_the_onnx_checker():
    model = onnx.load_from_string(tiny_vision_model("data"))
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == ["data"]
    assert parse_model(tiny_vision_model("data")).inputs[0].dims == (1, 3, 8, 8)


@pytest.mark.parametrize("data", [b"", b"version https://git-lfs.github.com/spec/v1\n", b"\x08\x07"])
def test_the_reader_refuses_bytes_that_are_no_onnx_model(data):
    with pytest.raises(NotOnnxError):
        parse_model(data)


# --- atc ---------------------------------------------------------------------------------------------


def test_atc_is_on_path_only_after_sourcing_the_toolkit_environment(tmp_path):
    root = sim(tmp_path, "atlas-800i-a2")
    assert not (root / "bin" / "atc").exists()
    assert sourced(root, "sh", "-c", "command -v atc").stdout.strip().endswith("latest/bin/atc")


def test_atc_converts_an_onnx_model_and_writes_an_honest_om(tmp_path):
    root = sim(tmp_path, "atlas-800i-a2")
    model = write_tiny_vision_model(tmp_path / "vision.onnx")
    result = atc(root, model, "--input_shape=images:1,3,8,8", "--input_format=NCHW", "--log=error")
    assert result.returncode == 0, result.stdout
    lines = result.stdout.splitlines()
    assert lines[0] == "ATC start working now, please wait for a moment."
    assert any("compile operator 1/3: Conv for Ascend910B3" in line for line in lines)
    assert lines[-1] == "ATC run success, welcome to the next use."
    om = (root / "out" / "model.om").read_bytes()
    assert om.startswith(OM_MAGIC)
    header = json.loads(om[len(OM_MAGIC) :])
    assert header["soc_version"] == "Ascend910B3"
    assert header["inputs"] == {"images": [1, 3, 8, 8]}
    assert "not a real offline model" in header["written_by"]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--input_shape=input:1,3,8,8"], "E10016: Opname [input] specified in [--input_shape] is not found"),
        (
            ["--input_shape=images:1,3,8"],
            "parameter [--input_shape] is invalid. Reason: input [images] has 4",
        ),
        (["--input_shape=images:1,x"], "parameter [--input_shape] is invalid"),
        (
            ["--input_shape=images:1,3,224,224"],
            "E10001: Value [images:1,3,224,224] for parameter [--input_shape] is invalid. Reason: the "
            "shape of input [images] is static in the model, [1,3,8,8]; dimension 2 is 8 there, "
            "--input_shape gives 224.",
        ),
        (["--input_format=BGR"], "Value [BGR] for parameter [--input_format] is invalid"),
        (["--input_shape"], "Value [] for parameter [--input_shape] is invalid"),
        (
            ["--outptu=/tmp/x"],
            "Value [--outptu=/tmp/x] for parameter [argv] is invalid. Reason: unknown option",
        ),
        (["--framework=3"], "the sim atc converts ONNX models only"),
    ],
)
def test_atc_refuses_what_real_atc_refuses(tmp_path, extra, expected):
    root = sim(tmp_path, "atlas-800i-a2")
    result = atc(root, write_tiny_vision_model(tmp_path / "vision.onnx"), *extra)
    assert result.returncode == 255
    assert "ATC run failed" in result.stdout
    assert expected in result.stdout
    assert not (root / "out" / "model.om").exists()


def test_a_static_input_takes_its_own_shape_and_the_refusal_says_which_one(tmp_path):
    root = sim(tmp_path, "atlas-800i-a2")
    model = write_tiny_vision_model(tmp_path / "vision.onnx")
    refused = atc(root, model, "--input_shape=images:2,3,8,8")
    assert refused.returncode == 255
    assert "Solution: Give --input_shape=images:1,3,8,8 (or leave it out)" in refused.stdout
    assert atc(root, model, "--input_shape=images:1,3,8,8").returncode == 0


def test_the_reader_gives_an_onnx_models_facts(tmp_path):
    from workers.models.onnx_file import onnx_facts

    path = write_tiny_vision_model(tmp_path / "vision.onnx")
    facts = onnx_facts(path)
    assert facts == {
        "file_bytes": path.stat().st_size,
        "ir_version": 8,
        "opset": 13,
        "inputs": [{"name": "images", "dims": [1, 3, 8, 8]}],
        "outputs": ["features"],
        "operators": 3,
    }
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not onnx")
    assert "unreadable" in onnx_facts(broken)


def test_atc_needs_model_framework_output_and_soc_version(tmp_path):
    root = sim(tmp_path, "atlas-800i-a2")
    result = sourced(root, "atc", "--model=/x.onnx", "--framework=5", "--soc_version=Ascend910B3")
    assert result.returncode == 255
    assert "Value [] for parameter [--output] is invalid. Reason: the option is required" in result.stdout


def test_a_310p_host_refuses_a_910b_soc_and_accepts_its_own(tmp_path):
    root = sim(tmp_path, "atlas-300i-duo")
    model = write_tiny_vision_model(tmp_path / "vision.onnx")
    refused = atc(root, model, soc="Ascend910B3")
    assert refused.returncode == 255
    assert "Value [Ascend910B3] for parameter [--soc_version] is invalid" in refused.stdout
    assert "no operator package for 910b (installed: 310p)" in refused.stdout
    assert "it is not a SoC this CANN version knows" in atc(root, model, soc="Ascend999").stdout
    assert atc(root, model, soc="Ascend310P3").returncode == 0


def test_atc_refuses_an_unreadable_model_and_a_missing_file(tmp_path):
    root = sim(tmp_path, "atlas-800i-a2")
    pointer = tmp_path / "lfs.onnx"
    pointer.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n")
    result = atc(root, pointer)
    assert result.returncode == 255
    assert (
        f"Value [{pointer}] for parameter [--model] is invalid. Reason: the file is not a valid"
        in result.stdout
    )
    missing = atc(root, tmp_path / "absent.onnx")
    assert "for parameter [--model] is invalid. Reason: the file cannot be read" in missing.stdout


def test_a_dynamic_input_needs_its_shape_given(tmp_path):
    root = sim(tmp_path, "atlas-800i-a2")
    model = helper_model(tmp_path / "dynamic.onnx")
    result = atc(root, model)
    assert result.returncode == 255
    assert (
        "Value [-1] for parameter [pixels] is invalid. Reason: maybe you should set input_shape"
        in result.stdout
    )
    given = atc(root, model, "--input_shape=pixels:2,3,16,16")
    assert given.returncode == 0, given.stdout


def test_the_installed_toolkit_package_brings_atc_and_uninstalling_takes_it_away(tmp_path):
    ascend = tmp_path / "Ascend"
    packages = tmp_path / "packages"
    for kind, action in (("driver", "--full"), ("toolkit", "--full"), ("ops", "--install")):
        package = make_sim_package(kind, "8.3.RC2" if kind != "driver" else "24.1.rc2", packages, chip="310p")
        subprocess.run([str(package), action, "--quiet", f"--install-path={ascend}"], check=True, timeout=30)
    tool = ascend / "ascend-toolkit/latest/bin/atc"
    model = write_tiny_vision_model(tmp_path / "vision.onnx")
    argv = [str(tool), f"--model={model}", "--framework=5", f"--output={tmp_path / 'm'}"]
    ok = subprocess.run(
        [*argv, "--soc_version=Ascend310P3"], capture_output=True, text=True, env={**os.environ, **FAST}
    )
    assert ok.returncode == 0, ok.stdout
    assert (tmp_path / "m.om").is_file()
    toolkit = make_sim_package("toolkit", "8.3.RC2", packages)
    subprocess.run([str(toolkit), "--uninstall", f"--install-path={ascend}"], check=True, timeout=30)
    assert not tool.exists()


# --- msmodelslim ------------------------------------------------------------------------------------


def msmodelslim(root: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(root / "bin" / "msmodelslim"), *argv], capture_output=True, text=True, timeout=120, check=False
    )


def test_msmodelslim_is_there_only_when_the_sim_host_asks_for_it(tmp_path):
    assert not (sim(tmp_path, "atlas-300i-duo") / "bin" / "msmodelslim").exists()
    root = sim(tmp_path, "atlas-800i-a2", msmodelslim=True)
    assert os.access(root / "bin" / "msmodelslim", os.X_OK)
    create_host(root, "atlas-800i-a2")  # a refresh keeps what was installed
    assert (root / "bin" / "msmodelslim").exists()


def test_msmodelslim_quantizes_a_model_to_w8a8_with_the_project_quantizer(tmp_path):
    root = sim(tmp_path, "atlas-800i-a2", msmodelslim=True)
    source = make_tiny_model(tmp_path / "tiny", arch="qwen2")
    save = tmp_path / "tiny-w8a8"
    result = msmodelslim(
        root, "quant", "--model_path", str(source), "--save_path", str(save), "--model_type", "Qwen2-0.5B",
        "--device", "npu", "--quant_type", "w8a8",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "msmodelslim-logger - INFO - quantizing" in result.stdout
    description = json.loads((save / "quant_model_description.json").read_text())
    assert description["model_quant_type"].startswith("W8A8")
    assert any(value.startswith("W8A8") for key, value in description.items() if key.endswith("proj.weight"))


QUANT = ["quant", "--model_type", "Q", "--model_path", "/m", "--save_path", "/s"]


@pytest.mark.parametrize(
    ("argv", "status", "expected"),
    [
        (["quant", "--model_path", "/m", "--save_path", "/s"], 2, "required: --model_type"),
        ([*QUANT, "--device", "gpu"], 2, "invalid choice: 'gpu'"),
        (["convert"], 2, "invalid choice: 'convert'"),
        ([*QUANT, "--quant_type", "w4a16"], 1, "implements --quant_type w8a8 only"),
        ([*QUANT, "--trust_remote_code", "maybe"], 2, "expected true or false"),
        (QUANT, 1, "ERROR - quantization failed"),
    ],
)
def test_msmodelslim_refuses_a_bad_command_line(tmp_path, argv, status, expected):
    result = msmodelslim(sim(tmp_path, "atlas-800i-a2", msmodelslim=True), *argv)
    assert result.returncode == status
    assert expected in result.stdout + result.stderr
