"""npu-smi: the commands to run and the parsers for what they print.

The one import for the rest of the agent (inventory, metrics sampler, simulator tests):

    argv = npu_smi_argv("table")                   # ["npu-smi", "info"]
    table = parse_table(stdout)                    # {"version", "chips", "processes"}
    mapping = parse_mapping(stdout_of_dash_m)      # logic ids for ASCEND_RT_VISIBLE_DEVICES
    readings = parse_readings(stdout_of_dash_t, npu=0)
    topo = parse_topo(stdout_of_topo)              # {"devices", "links", "cpu_affinity"}

Every parser raises NpuSmiError(message, hint) instead of returning an empty result.

Command line, for checking a captured output by hand:

    python -m workers.ascend.npu_smi table FILE      # FILE "-" reads stdin
    python -m workers.ascend.npu_smi mapping FILE
    python -m workers.ascend.npu_smi list FILE
    python -m workers.ascend.npu_smi readings FILE [--npu N] [--chip C]
    python -m workers.ascend.npu_smi topo FILE       # npu-smi info -t topo
    python -m workers.ascend.npu_smi health FILE     # npu-smi info -t health -i N (codes, gone)
    python -m workers.ascend.npu_smi ecc FILE        # npu-smi info -t ecc -i N (per chip)

It prints JSON; on an npu-smi failure it prints the message and the hint on stderr and exits 2.
"""

import argparse
import json
import sys

from workers.ascend.npu_health import device_gone, parse_ecc_chips, parse_health
from workers.ascend.npu_smi_errors import NpuSmiError, find_error, raise_for_error
from workers.ascend.npu_smi_kv import NpuReading, parse_kv, parse_list, parse_readings
from workers.ascend.npu_smi_mapping import parse_mapping
from workers.ascend.npu_smi_table import CHIP_FIELDS, PROCESS_FIELDS, parse_table
from workers.ascend.npu_smi_topo import parse_topo
from workers.i18n import gettext_noop as _

__all__ = [
    "CHIP_FIELDS",
    "NPU_SMI",
    "PROCESS_FIELDS",
    "T_TYPES",
    "NpuReading",
    "NpuSmiError",
    "find_error",
    "main",
    "npu_smi_argv",
    "parse_kv",
    "parse_list",
    "parse_mapping",
    "parse_readings",
    "parse_table",
    "parse_topo",
    "raise_for_error",
]

NPU_SMI = "npu-smi"
# `npu-smi info -t TYPE` types the agent reads; each answers in `key : value` blocks.
T_TYPES = frozenset({"usages", "common", "memory", "power", "temp", "health", "board", "product", "ecc"})
_FIXED_COMMANDS = {
    "table": ["info"],
    "mapping": ["info", "-m"],
    "list": ["info", "-l"],
    "topo": ["info", "-t", "topo"],
}


def npu_smi_argv(
    kind: str, npu: int | None = None, chip: int | None = None, binary: str = NPU_SMI
) -> list[str]:
    """The argv for one npu-smi query: "table", "mapping", "list", "topo" or a -t type such as "usages".

    -t types need `npu` (the NPU id, as in the table, not the logic id); `chip` adds -c.
    """
    if kind in _FIXED_COMMANDS:
        if npu is not None or chip is not None:
            raise ValueError(f"npu-smi {kind} takes no NPU or chip id; drop npu= and chip=")
        return [binary, *_FIXED_COMMANDS[kind]]
    if kind not in T_TYPES:
        known = ", ".join(sorted([*_FIXED_COMMANDS, *T_TYPES]))
        raise ValueError(f"unknown npu-smi query {kind!r}; use one of: {known}")
    argv = [binary, "info", "-t", kind, "-i", str(_id("npu", npu))]
    if chip is not None:
        argv += ["-c", str(_id("chip", chip))]
    return argv


def _id(name: str, value: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int (the id npu-smi prints), got {value!r}")
    return value


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError as error:
        raise NpuSmiError(
            _("cannot read {path}: {reason}").format(path=path, reason=error.strerror),
            _("Pass the file that holds the captured npu-smi output, or - for stdin."),
        ) from error


def _readings_json(text: str, npu: int | None, chip: int | None) -> list[dict]:
    return [reading.to_dict() for reading in parse_readings(text, npu=npu, chip=chip)]


def _health_json(what: str, text: str) -> dict:
    if what == "health":
        return {**parse_health(text), "gone": device_gone(text)}
    return {"chips": {str(chip): counts for chip, counts in parse_ecc_chips(text).items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workers.ascend.npu_smi", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "what",
        choices=["table", "mapping", "list", "readings", "topo", "health", "ecc"],
        help="which npu-smi output",
    )
    parser.add_argument("file", help="captured output, or - for stdin")
    parser.add_argument("--npu", type=int, help="readings: the -i the output was taken with")
    parser.add_argument("--chip", type=int, help="readings: the -c the output was taken with")
    args = parser.parse_args(argv)
    try:
        text = _read(args.file)
        result: dict | list[dict]
        if args.what == "table":
            result = parse_table(text)
        elif args.what == "mapping":
            result = parse_mapping(text)
        elif args.what == "list":
            result = parse_list(text)
        elif args.what == "topo":
            result = parse_topo(text)
        elif args.what in ("health", "ecc"):
            result = _health_json(args.what, text)
        else:
            result = _readings_json(text, args.npu, args.chip)
    except NpuSmiError as error:
        print(f"error: {error.message}", file=sys.stderr)
        if error.hint:
            print(f"hint: {error.hint}", file=sys.stderr)
        return 2
    json.dump(result, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
