"""The sim host's `msmodelslim`: a stand-in for msModelSlim's one-line quantization, not msModelSlim.

    msmodelslim quant --model_path SRC --save_path DST --model_type Qwen2.5-7B-Instruct \
        [--device npu|cpu] [--quant_type w8a8] [--trust_remote_code [true|false]]

It takes the real command line (argparse, as the real tool; --model_type is required on its ordinary
path), then quantizes with the project's own quantizer (workers.models.quantize), so DST is a real
int8 model with a quant_model_description.json that vllm-ascend can load. What differs from msModelSlim:
no calibration and no best-practice YAML, so the result is W8A8_DYNAMIC (per-channel int8 weights,
per-token activations at run time) where the real w8a8 recipe may calibrate static activation scales;
only --quant_type w8a8 is implemented; --device is checked, never used (it all runs on the CPU).
A sim host has it when created with `--with-msmodelslim` (ROOT/bin/msmodelslim, on the agent's PATH like
a pip-installed console script).
"""

from __future__ import annotations

import argparse
import datetime

from workers.models.model_folder import BadSourceError

QUANT_TYPES = ("w8a8", "w8a16", "w4a16", "w8a8s", "w4a8")
IMPLEMENTED = ("w8a8",)


def log(level: str, message: str) -> None:
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    print(f"{stamp} - msmodelslim-logger - {level} - {message}", flush=True)


def boolean(text: str) -> bool:
    value = text.lower()
    if value in ("true", "yes", "on", "1"):
        return True
    if value in ("false", "no", "off", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="msmodelslim", description="msModelSlim (Ascend Panel sim stand-in)"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    quant = commands.add_parser("quant", help="quantize a model in one command")
    quant.add_argument("--model_type", required=True)
    quant.add_argument("--model_path", required=True)
    quant.add_argument("--save_path", required=True)
    quant.add_argument("--device", default="npu", choices=("npu", "cpu"))
    quant.add_argument("--quant_type", default="w8a8", choices=QUANT_TYPES)
    quant.add_argument("--trust_remote_code", nargs="?", const=True, default=False, type=boolean)
    return parser


def main(argv: list[str], root: str = "") -> int:
    args = build_parser().parse_args(argv)  # exits 2 with argparse's usage error, as the real tool does
    if args.quant_type not in IMPLEMENTED:
        log("ERROR", f"the sim stand-in implements --quant_type {', '.join(IMPLEMENTED)} only")
        return 1
    return quantize(args)


def quantize(args: argparse.Namespace) -> int:
    from workers.models.quantize import quantize_w8a8_dynamic  # numpy: only a quantize run loads it

    log("INFO", f"model_type: {args.model_type}, quant_type: {args.quant_type}, device: {args.device}")
    log("INFO", f"loading model from {args.model_path}")
    last_step = -1

    def on_progress(percent: float, stage: str) -> None:
        nonlocal last_step
        if int(percent) // 10 > last_step:  # one line per tenth, as the real tool logs per layer block
            last_step = int(percent) // 10
            log("INFO", f"quantizing {percent:5.1f}% {stage}")

    try:
        report = quantize_w8a8_dynamic(args.model_path, args.save_path, on_progress=on_progress)
    except BadSourceError as error:
        log("ERROR", f"quantization failed: {error}")
        return 1
    except OSError as error:
        log("ERROR", f"quantization failed: {error.strerror}: {error.filename}")
        return 1
    log(
        "INFO",
        f"{report['tensors_quantized']} linear layers quantized, {report['tensors_kept']} kept in float",
    )
    log("INFO", f"quantized weights and quant_model_description.json saved to {args.save_path}")
    return 0
