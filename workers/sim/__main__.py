"""Command line of the sim host.

python -m workers.sim create --profile atlas-800i-a2 --root DIR [--node-name NAME] [--reset]
    [--with-msmodelslim] [--sample-onnx] [--tiny-chat-model]
python -m workers.sim fault --root DIR --npu N [--chip C] --health OK|Warning|Alarm
python -m workers.sim fault --root DIR --driver-unloaded | --device-held | --engine-dies-on-first-request
    | --clear
"""

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from workers.models.onnx_file import write_tiny_vision_model
from workers.models.tiny import make_tiny_model
from workers.sim import state as sim_state
from workers.sim.profiles import PROFILES, get_profile
from workers.sim.tree import create_host

SAMPLE_ONNX = "data/models/sample-vision/model.onnx"
TINY_CHAT_MODEL = "data/models/tiny-chat"


def write_tiny_chat_model(folder: Path) -> bool:
    """A small chat model (Llama layout, random weights, locally trained tokenizer with a chat template) for
    the sim engine to serve, generated here with no hub. Kept when already there; False then."""
    if (folder / "config.json").is_file() and (folder / "model.safetensors").is_file():
        return False
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        make_tiny_model(staging, arch="llama")
        shutil.rmtree(folder, ignore_errors=True)  # a half-written folder of an interrupted run
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return True


def inject_fault(root: Path, args: argparse.Namespace) -> str:
    current = sim_state.load(root)
    profile = get_profile(current["profile"])
    if args.clear:
        sim_state.clear_faults(root)
        return "all faults cleared"
    if args.driver_unloaded:
        sim_state.set_driver_unloaded(root)
        return "driver marked as not loaded: npu-smi now fails with -8005"
    if args.device_held:
        sim_state.set_device_held(root)
        return "device marked as held by another container: npu-smi now fails with -8020"
    if args.engine_dies_on_first_request:
        sim_state.set_engine_dies_on_first_request(root)
        return "engines now answer /health, then die at their first completion request"
    if args.npu is None or args.health is None:
        raise sim_state.SimStateError(
            "give --npu N --health OK|Warning|Alarm, or one of --driver-unloaded, --device-held, "
            "--engine-dies-on-first-request, --clear"
        )
    chips = [chip.chip_id for chip in profile.chips_of(args.npu)]
    if not chips:
        known = profile.npu_ids
        raise sim_state.SimStateError(f"NPU {args.npu} does not exist; {profile.name} has NPU ids {known}")
    if args.chip not in chips:
        raise sim_state.SimStateError(f"NPU {args.npu} has chips {chips}, not {args.chip}")
    sim_state.set_health(root, args.npu, args.chip, args.health)
    return f"NPU {args.npu} chip {args.chip} health is now {args.health}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m workers.sim", description="A simulated Ascend host.")
    commands = parser.add_subparsers(dest="command", required=True)

    create_parser = commands.add_parser("create", help="write a sim root (idempotent)")
    create_parser.add_argument("--profile", required=True, choices=sorted(PROFILES))
    create_parser.add_argument("--root", required=True, type=Path)
    create_parser.add_argument("--node-name")
    create_parser.add_argument("--reset", action="store_true", help="forget faults and holders")
    create_parser.add_argument(
        "--with-msmodelslim", action="store_true", help="install the msModelSlim stand-in (bin/msmodelslim)"
    )
    create_parser.add_argument(
        "--sample-onnx",
        action="store_true",
        help=f"put a tiny ONNX vision model at {SAMPLE_ONNX} to try ATC with (input images:1,3,8,8)",
    )
    create_parser.add_argument(
        "--tiny-chat-model",
        action="store_true",
        help=f"generate a tiny chat model at {TINY_CHAT_MODEL} for the sim engine to serve (no hub needed)",
    )

    fault_parser = commands.add_parser("fault", help="inject or clear a fault")
    fault_parser.add_argument("--root", required=True, type=Path)
    fault_parser.add_argument("--npu", type=int)
    fault_parser.add_argument("--chip", type=int, default=0)
    fault_parser.add_argument("--health", choices=sim_state.HEALTH_VALUES)
    fault_parser.add_argument("--driver-unloaded", action="store_true")
    fault_parser.add_argument("--device-held", action="store_true")
    fault_parser.add_argument("--engine-dies-on-first-request", action="store_true")
    fault_parser.add_argument("--clear", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "create":
            state = create_host(args.root, args.profile, args.node_name, args.reset, args.with_msmodelslim)
            if args.sample_onnx:
                write_tiny_vision_model(args.root / SAMPLE_ONNX)
            if args.tiny_chat_model and write_tiny_chat_model(args.root / TINY_CHAT_MODEL):
                print(f"tiny chat model generated at /{TINY_CHAT_MODEL}")
            print(f"sim host {state['node_name']} ({state['profile']}) ready at {args.root.resolve()}")
            where = args.root.resolve()
            print(f"use it with: PATH={where}/bin:$PATH ASCEND_PANEL_SIM_ROOT={where}")
        else:
            print(inject_fault(args.root, args))
    except (sim_state.SimStateError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
