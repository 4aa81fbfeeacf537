"""The sim host's `atc`: the CANN model converter's command line, checks and failure texts, no compiler.

It lives where the toolkit installs the real one, <toolkit home>/bin/atc, so it is on PATH only after
`source .../ascend-toolkit/set_env.sh`, and it goes when the toolkit is uninstalled. Like the real tool it
takes `--name=value` options, reads the ONNX model (workers.models.onnx_file), checks --input_shape against
the graph's inputs, prints its progress as it goes, ends with `ATC run success` or `ATC run failed` plus
an error in ATC's form (E10001 for an invalid option value, E10016 for an --input_shape name the model
does not have), and writes <output>.om.

What is simulated: the .om is a small file whose header says it came from the sim (nothing can run it;
vLLM never serves .om files anyway), and SoC support follows the operator (kernels) packages installed
in this toolkit, opp/built-in/op_impl/ai_core/tbe/kernel/<chip>: the sim's toolkit carries its own chip's
only, so a 310P host refuses --soc_version=Ascend910B3. Only ONNX (--framework=5) is converted.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path

from workers.models.onnx_file import NotOnnxError, OnnxModel, read_model

FRAMEWORK_ONNX = "5"
FRAMEWORKS = {"0": "Caffe", "1": "MindSpore", "3": "TensorFlow", "5": "ONNX"}
INPUT_FORMATS = ("NCHW", "NHWC", "ND", "NCDHW", "NDHWC")
LOG_LEVELS = ("debug", "info", "warning", "error", "null")
OPTIONS = ("model", "framework", "output", "soc_version", "input_shape", "input_format", "log")
REQUIRED = ("model", "framework", "output", "soc_version")
KERNEL_DIR = Path("opp/built-in/op_impl/ai_core/tbe/kernel")
# SoC name → the chip name of the operator package that supports it (as in the package file names).
SOC_CHIPS = (
    (re.compile(r"Ascend910B[1-4]\Z"), "910b"),
    (re.compile(r"Ascend910_93\d\d\Z"), "a3"),
    (re.compile(r"Ascend310P[13]\Z"), "310p"),
    (re.compile(r"Ascend310B[1-4]\Z"), "310b"),
    (re.compile(r"Ascend910(A|ProA|ProB|PremiumA)?\Z"), "910"),
    (re.compile(r"Ascend310\Z"), "310"),
)
OM_MAGIC = b"ASCEND-PANEL-SIM-OM\n"
STEP_SECONDS = float(os.environ.get("ASCEND_PANEL_SIM_ATC_STEP_SECONDS", "0.4"))
EXIT_FAILED = 255  # the real tool's exit status on a failed run (-1)


class AtcError(Exception):
    """A refused run: `code` is the error code ATC prints, the message its text."""

    def __init__(self, code: str, message: str, solution: str = "Try again with a valid argument."):
        super().__init__(message)
        self.code = code
        self.solution = solution


def invalid(value: str, parameter: str, reason: str) -> AtcError:
    return AtcError("E10001", f"Value [{value}] for parameter [{parameter}] is invalid. Reason: {reason}")


def main(argv: list[str], toolkit_home: str | Path) -> int:
    if argv in (["-h"], ["--help"]):
        print(usage())
        return 0
    print("ATC start working now, please wait for a moment.", flush=True)
    try:
        options = parse_options(argv)
        check_soc(options["soc_version"], Path(toolkit_home))
        model = read_onnx(options["model"])
        shapes = check_input_shape(options.get("input_shape", ""), model)
        convert(options, model, shapes)
    except AtcError as error:
        print(
            "ATC run failed, Please check the detail log, Try 'atc --help' for more information", flush=True
        )
        print(f"{error.code}: {error}", flush=True)
        print(f"        Solution: {error.solution}", flush=True)
        return EXIT_FAILED
    print("ATC run success, welcome to the next use.", flush=True)
    return 0


def usage() -> str:
    return (
        "usage: atc <args>\n"
        "  --model        path of the model file (ONNX in the sim)\n"
        "  --framework    0: Caffe, 1: MindSpore, 3: TensorFlow, 5: ONNX (the sim converts 5 only)\n"
        "  --output       output file path and name prefix; <output>.om is written\n"
        "  --soc_version  the SoC that runs the model, e.g. Ascend910B3 or Ascend310P3\n"
        '  --input_shape  input shapes, e.g. "images:1,3,640,640;scale:1"\n'
        f"  --input_format {', '.join(INPUT_FORMATS)} (default NCHW)\n"
        f"  --log          {', '.join(LOG_LEVELS)} (default null)"
    )


def parse_options(argv: list[str]) -> dict[str, str]:
    options: dict[str, str] = {}
    for argument in argv:
        name, has_value, value = argument.removeprefix("--").partition("=")
        if not argument.startswith("--") or name not in OPTIONS:
            raise AtcError(
                "E10001",
                f"Value [{argument}] for parameter [argv] is invalid. Reason: unknown option; atc takes "
                f"--name=value options: {', '.join('--' + o for o in OPTIONS)}",
            )
        if not has_value or not value:
            raise invalid("", f"--{name}", "the value is empty; give it as --name=value")
        options[name] = value
    for name in REQUIRED:
        if name not in options:
            raise invalid("", f"--{name}", "the option is required")
    framework = options["framework"]
    if framework != FRAMEWORK_ONNX:
        reason = (
            f"the sim atc converts ONNX models only (--framework={FRAMEWORK_ONNX})"
            if framework in FRAMEWORKS
            else f"the value must be one of {', '.join(FRAMEWORKS)}"
        )
        raise invalid(framework, "--framework", reason)
    if options.setdefault("input_format", "NCHW") not in INPUT_FORMATS:
        raise invalid(
            options["input_format"], "--input_format", f"it must be one of {', '.join(INPUT_FORMATS)}"
        )
    if options.setdefault("log", "null") not in LOG_LEVELS:
        raise invalid(options["log"], "--log", f"it must be one of {', '.join(LOG_LEVELS)}")
    return options


def chip_of(soc_version: str) -> str | None:
    return next((chip for pattern, chip in SOC_CHIPS if pattern.match(soc_version)), None)


def installed_chips(toolkit_home: Path) -> list[str]:
    kernels = toolkit_home / KERNEL_DIR
    return sorted(p.name for p in kernels.iterdir() if p.is_dir()) if kernels.is_dir() else []


def check_soc(soc_version: str, toolkit_home: Path) -> None:
    chip = chip_of(soc_version)
    if chip is None:
        raise invalid(soc_version, "--soc_version", "it is not a SoC this CANN version knows")
    installed = installed_chips(toolkit_home)
    if chip not in installed:
        have = ", ".join(installed) or "none"
        raise invalid(
            soc_version,
            "--soc_version",
            f"this toolkit has no operator package for {chip} (installed: {have}); "
            "the SoC must be one whose kernels package is installed",
        )


def read_onnx(path: str) -> OnnxModel:
    try:
        return read_model(path)
    except OSError as error:
        raise invalid(path, "--model", f"the file cannot be read ({error.strerror})") from None
    except NotOnnxError as error:
        raise invalid(path, "--model", f"the file is not a valid ONNX model ({error})") from None


def parse_input_shape(text: str) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for part in filter(None, text.split(";")):
        name, _, dims = part.rpartition(":")
        try:
            values = tuple(int(d) for d in dims.split(","))
        except ValueError:
            values = ()
        if not name or not values or any(v == 0 or v < -1 for v in values):
            raise invalid(text, "--input_shape", 'write it as "name:d1,d2,...;name2:..." with positive dims')
        shapes[name] = values
    return shapes


def check_input_shape(text: str, model: OnnxModel) -> dict[str, tuple[int | str, ...]]:
    """The shape of every input after --input_shape; refuses names and ranks the graph does not have."""
    given = parse_input_shape(text)
    inputs = {graph_input.name: graph_input.dims for graph_input in model.inputs}
    for name, dims in given.items():
        if name not in inputs:
            raise AtcError(
                "E10016",
                f"Opname [{name}] specified in [--input_shape] is not found in the model; "
                f"the model's inputs are [{', '.join(inputs)}].",
                "Use the graph input names of the model in --input_shape.",
            )
        if len(dims) != len(inputs[name]):
            raise invalid(
                text,
                "--input_shape",
                f"input [{name}] has {len(inputs[name])} dimensions in the model, "
                f"--input_shape gives {len(dims)}",
            )
        check_static_dims(text, name, dims, inputs[name])
    shapes = {name: given.get(name, dims) for name, dims in inputs.items()}
    for name, shape in shapes.items():
        if any(not isinstance(d, int) or d <= 0 for d in shape) and name not in given:
            raise invalid("-1", name, "maybe you should set input_shape to specify its shape")
    return shapes


def check_static_dims(text: str, name: str, given: tuple[int, ...], model: tuple[int | str, ...]) -> None:
    """ATC takes --input_shape as is only for dimensions the graph leaves open (-1, ? or a symbol); a fixed
    dimension must be given its own value, as the graph's weights were made for it."""
    for index, (want, have) in enumerate(zip(given, model, strict=True)):
        if isinstance(have, int) and have > 0 and want != have:
            model_shape = ",".join(map(str, model))
            raise AtcError(
                "E10001",
                f"Value [{text}] for parameter [--input_shape] is invalid. Reason: the shape of input "
                f"[{name}] is static in the model, [{model_shape}]; dimension {index} is {have} there, "
                f"--input_shape gives {want}.",
                f"Give --input_shape={name}:{model_shape} (or leave it out), or export the ONNX model "
                "with that dimension dynamic.",
            )


def convert(options: dict[str, str], model: OnnxModel, shapes: dict) -> None:
    model_path = Path(options["model"])
    steps = [
        f"parse ONNX model {model_path.name}: ir_version {model.ir_version}, opset {model.opset}, "
        f"{len(model.op_types)} nodes",
        *(
            f"input {name}: {','.join(map(str, dims))} ({options['input_format']})"
            for name, dims in shapes.items()
        ),
        "graph optimisation and operator fusion",
        *(
            f"compile operator {index + 1}/{len(model.op_types)}: {op_type} for {options['soc_version']}"
            for index, op_type in enumerate(model.op_types)
        ),
        "build offline model",
    ]
    for step in steps:
        print(f"[INFO] ATC(sim) {step}", flush=True)
        time.sleep(STEP_SECONDS)
    header = {
        "written_by": "the Ascend Panel sim atc; not a real offline model, nothing can run it",
        "soc_version": options["soc_version"],
        "input_format": options["input_format"],
        "inputs": {name: list(dims) for name, dims in shapes.items()},
        "outputs": list(model.outputs),
        "operators": list(model.op_types),
        "onnx_sha256": hashlib.sha256(model_path.read_bytes()).hexdigest(),
    }
    output = Path(options["output"] + ".om")
    output.parent.mkdir(parents=True, exist_ok=True)
    temporary = output.with_name(f".{output.name}.tmp")
    temporary.write_bytes(OM_MAGIC + json.dumps(header, indent=2).encode() + b"\n")
    os.replace(temporary, output)
