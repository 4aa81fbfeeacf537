"""Command line of the sim host.

python -m workers.sim create --profile atlas-800i-a2 --root DIR [--node-name NAME] [--reset]
    [--with-msmodelslim] [--sample-onnx] [--tiny-chat-model]
python -m workers.sim fault --root DIR --npu N [--chip C] (--health OK|Warning|Alarm|Critical
    | --ecc-burst COUNT [--single-bit] | --link-down | --link-up | --chip-gone | --chip-back)
python -m workers.sim fault --root DIR --driver-unloaded | --device-held | --engine-dies-on-first-request
    | --clear
python -m workers.sim fault --root DIR --power-off | --power-on   (the whole host: workers/sim/power.py)
python -m workers.sim fault --root DIR --cut-off | --reconnect   (its agent cut off, its engines running)
python -m workers.sim fabric --root DIR [--switch DIR] [--host-ip IP] [--ifname NAME]
    [--iface-down|--iface-up] [--unreachable IP | --reachable IP]
    [--npu LOGIC_ID (--link-down|--link-up|--no-ip|--ip|--tls on|off|--ping-loss PCT)]
"""

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from workers.models.onnx_file import write_tiny_vision_model
from workers.models.tiny import make_tiny_model
from workers.sim import fabric as sim_fabric
from workers.sim import power as sim_power
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
    if args.power_off:
        done = sim_power.power_off(root)
        return (
            f"power off: engines {done['engines']} and {len(done['killed'])} other processes killed, "
            f"agent {done['frozen']} stopped until --power-on"
        )
    if args.power_on:
        return f"power on: agent {sim_power.power_on(root)['booted']} boots again (its supervisor starts it)"
    if args.cut_off:
        done = sim_power.cut_off(root)
        return f"cut off: agent {done['frozen']} stopped, engines {done['engines']} left running"
    if args.reconnect:
        return f"reconnected: agent {sim_power.reconnect(root)['resumed']} goes on"
    if args.driver_unloaded:
        sim_state.set_driver_unloaded(root)
        return "driver marked as not loaded: npu-smi now fails with -8005"
    if args.device_held:
        sim_state.set_device_held(root)
        return "device marked as held by another container: npu-smi now fails with -8020"
    if args.engine_dies_on_first_request:
        sim_state.set_engine_dies_on_first_request(root)
        return "engines now answer /health, then die at their first completion request"
    return _inject_chip_fault(root, profile, args)


CHIP_FAULTS = ("health", "ecc_burst", "link_down", "link_up", "chip_gone", "chip_back")


def _inject_chip_fault(root: Path, profile, args: argparse.Namespace) -> str:
    """A fault of one chip (--npu N [--chip C]), in the text the real tools print for it."""
    asked = [name for name in CHIP_FAULTS if getattr(args, name) not in (None, False)]
    if args.npu is None or len(asked) != 1:
        raise sim_state.SimStateError(
            "give --npu N [--chip C] and one of --health OK|Warning|Alarm|Critical, --ecc-burst COUNT, "
            "--link-down, --link-up, --chip-gone, --chip-back; or one of --driver-unloaded, --device-held, "
            "--engine-dies-on-first-request, --clear"
        )
    chips = profile.chips_of(args.npu)
    if not chips:
        known = profile.npu_ids
        raise sim_state.SimStateError(f"NPU {args.npu} does not exist; {profile.name} has NPU ids {known}")
    chip = next((chip for chip in chips if chip.chip_id == args.chip), None)
    if chip is None:
        raise sim_state.SimStateError(
            f"NPU {args.npu} has chips {[c.chip_id for c in chips]}, not {args.chip}"
        )
    where = f"NPU {args.npu} chip {args.chip}"
    if args.health is not None:
        sim_state.set_health(root, args.npu, args.chip, args.health)
        return f"{where} health is now {args.health}"
    if args.ecc_burst is not None:
        kind = "single" if args.single_bit else "double"
        counts = sim_state.add_ecc_errors(root, args.npu, args.chip, **{kind: args.ecc_burst})
        return f"{where}: {args.ecc_burst} {kind}-bit HBM ECC errors added (now {counts})"
    if args.link_down or args.link_up:
        if not sim_fabric.has_nics(profile):
            raise sim_state.SimStateError(
                f"{profile.name} has no RoCE ports (hccn_tool answers nothing there)"
            )
        sim_fabric.set_link(root, chip.logic_id, up=args.link_up)
        return f"{where} (logic id {chip.logic_id}) RoCE link {'up' if args.link_up else 'down'}"
    sim_state.set_chip_gone(root, args.npu, args.chip, gone=args.chip_gone)
    return f"{where} {'fell off the bus' if args.chip_gone else 'is back'}"


def change_fabric(root: Path, args: argparse.Namespace) -> str:
    done = []
    if args.switch:
        sim_fabric.join_switch(root, args.switch)
        done.append(f"on switch {args.switch}")
    if args.host_ip or args.ifname:
        sim_fabric.set_host(root, args.host_ip, args.ifname)
        done.append("host interface set")
    if args.iface_down or args.iface_up:
        sim_fabric.set_iface_up(root, args.iface_up)
        done.append(f"host interface {'up' if args.iface_up else 'down'}")
    for address, unreachable in ((args.unreachable, True), (args.reachable, False)):
        if address:
            sim_fabric.set_unreachable(root, address, unreachable)
            done.append(f"{address} {'unreachable' if unreachable else 'reachable'}")
    npu_changes = {
        "link": None if not (args.link_down or args.link_up) else args.link_up,
        "ip": None if not (args.no_ip or args.ip) else args.ip,
        "tls": None if args.tls is None else args.tls == "on",
        "ping_loss": args.ping_loss,
    }
    if any(value is not None for value in npu_changes.values()):
        if args.npu is None:
            raise sim_state.SimStateError("give --npu LOGIC_ID for a change of one NPU's NIC")
        setters = {
            "link": sim_fabric.set_link,
            "ip": sim_fabric.set_ip,
            "tls": sim_fabric.set_tls,
            "ping_loss": sim_fabric.set_ping_loss,
        }
        for what, value in npu_changes.items():
            if value is not None:
                setters[what](root, args.npu, value)
                done.append(f"NPU {args.npu} {what} = {value}")
    if not done:
        raise sim_state.SimStateError("nothing to change: see python -m workers.sim fabric --help")
    return "; ".join(done)


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
    fault_parser.add_argument(
        "--ecc-burst", type=int, metavar="COUNT", help="add COUNT double-bit HBM ECC errors (uncorrectable)"
    )
    fault_parser.add_argument("--single-bit", action="store_true", help="--ecc-burst adds single-bit errors")
    fault_parser.add_argument("--link-down", action="store_true", help="the chip's RoCE port goes down")
    fault_parser.add_argument(
        "--link-up", action="store_true", help="it comes back (a flap: link up count +1)"
    )
    fault_parser.add_argument("--chip-gone", action="store_true", help="the chip stops answering")
    fault_parser.add_argument("--chip-back", action="store_true", help="it answers again")
    fault_parser.add_argument("--driver-unloaded", action="store_true")
    fault_parser.add_argument("--device-held", action="store_true")
    fault_parser.add_argument("--engine-dies-on-first-request", action="store_true")
    fault_parser.add_argument("--clear", action="store_true")
    fault_parser.add_argument(
        "--power-off", action="store_true", help="the host loses power: engines die, the agent goes silent"
    )
    fault_parser.add_argument("--power-on", action="store_true", help="power back: the agent boots again")
    fault_parser.add_argument(
        "--cut-off",
        action="store_true",
        help="the host is cut off: its agent goes silent, its engines run on",
    )
    fault_parser.add_argument("--reconnect", action="store_true", help="the cut-off agent goes on")

    fabric_parser = commands.add_parser("fabric", help="the NPU NICs and host interface, and their faults")
    fabric_parser.add_argument("--root", required=True, type=Path)
    fabric_parser.add_argument(
        "--switch", type=Path, help="a folder shared by sim hosts that reach each other"
    )
    fabric_parser.add_argument("--host-ip")
    fabric_parser.add_argument("--ifname")
    fabric_parser.add_argument("--iface-down", action="store_true")
    fabric_parser.add_argument("--iface-up", action="store_true")
    fabric_parser.add_argument("--unreachable", metavar="IP")
    fabric_parser.add_argument("--reachable", metavar="IP")
    fabric_parser.add_argument("--npu", type=int, help="the NPU's logic id")
    fabric_parser.add_argument("--link-down", action="store_true")
    fabric_parser.add_argument("--link-up", action="store_true")
    fabric_parser.add_argument("--no-ip", action="store_true")
    fabric_parser.add_argument("--ip", action="store_true")
    fabric_parser.add_argument("--tls", choices=["on", "off"])
    fabric_parser.add_argument("--ping-loss", type=float, metavar="PCT")
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
        elif args.command == "fabric":
            print(change_fabric(args.root, args))
        else:
            print(inject_fault(args.root, args))
    except (sim_state.SimStateError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
