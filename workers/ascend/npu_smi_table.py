"""Parse the box table that plain `npu-smi info` prints.

The layout changed often (80 to 116 columns, one or two chips per NPU, `Chip Device` / `Chip Phy-ID`
second headers, the 950's split `NPU ID | Name` cells, a fifth process column on 26.x), so nothing
here depends on character positions or column order. Each line is split on `|` into cells; header
cells are split into column names, data cells into values, and a value takes its meaning from the
column name at the same place in the same cell of the header.
"""

import re

from workers.ascend.npu_smi_errors import nothing_found
from workers.ascend.npu_smi_values import USED_TOTAL, known_text, to_float, to_int, to_number, used_total

_SEPARATOR = re.compile(r"^\+[-=+]*\+?$")
_TITLE = re.compile(r"npu-smi\s+(?P<tool>\S+)(?:\s+Version:\s*(?P<version>\S+))?")
# Column names within one header cell are apart by two spaces or more, except after a closing
# parenthesis: the 950 prints "NPU Util(%) Memory-Usage(MB)" with one space.
_HEADER_GAP = re.compile(r"\s{2,}|(?<=\))\s+")
_NO_PROCESSES = re.compile(r"No running processes found", re.I)

# Header text (lower case, spaces removed) -> the field it fills. Unknown names are ignored, so a
# future column does not break the parser.
CHIP_COLUMNS = {
    "npu": "npu_id",
    "npuid": "npu_id",
    "name": "name",
    "chip": "chip_id",
    "chipid": "chip_id",
    "device": "device_id",
    "phy-id": "device_id",
    "chipphy-id": "device_id",
    "health": "health",
    "bus-id": "bus_id",
    "power(w)": "power_w",
    "temp(c)": "temp_c",
    "hugepages-usage(page)": "hugepages",
    "aicore(%)": "aicore_pct",
    "npuutil(%)": "aicore_pct",
    "memory-usage(mb)": "memory",
    "hbm-usage(mb)": "hbm",
}
PROCESS_COLUMNS = {
    "npu": "npu_id",
    "npuid": "npu_id",
    "chip": "chip_id",
    "chipid": "chip_id",
    "processid": "pid",
    "processname": "name",
    "processmemory(mb)": "memory_mb",
    "processidincontainer": "container_pid",
}
CHIP_FIELDS = (
    "npu_id",
    "chip_id",
    "device_id",
    "name",
    "health",
    "power_w",
    "temp_c",
    "hugepages_used",
    "hugepages_total",
    "bus_id",
    "aicore_pct",
    "memory_used_mb",
    "memory_total_mb",
    "hbm_used_mb",
    "hbm_total_mb",
)
PROCESS_FIELDS = ("npu_id", "chip_id", "pid", "name", "memory_mb")


def parse_table(text: str) -> dict:
    """`npu-smi info` -> {"version", "chips": [...], "processes": [...]} in the order printed.

    Raises NpuSmiError when the text holds no chip rows (a known failure or "no NPU table found").
    """
    chip_header: list[list[list[str]]] = []
    process_header: list[list[str]] | None = None
    rows: list[list[str]] = []  # data rows of the current group, i.e. since the last separator
    chips: list[dict] = []
    processes: list[dict] = []
    section = None  # None before the first header, then "chips" or "processes"

    def flush_group():
        if section == "chips":
            chips.extend(_chips_from_rows(chip_header, rows))
        rows.clear()

    lines = _table_lines(text)
    version = _version(lines)
    for line in lines:
        if _SEPARATOR.match(line):
            flush_group()
            continue
        cells = _cells(line)
        if _is_process_header(cells):
            flush_group()
            section, process_header = "processes", [_header_names(cell) for cell in cells]
        elif _is_chip_header(cells):
            if section != "chips":
                flush_group()
                section, chip_header = "chips", []
            chip_header.append([_header_names(cell) for cell in cells])
        elif section == "processes":
            process = _process_from_row(process_header, cells)
            if process is not None:
                processes.append(process)
        elif section == "chips" and any(cells):
            rows.append(cells)
    flush_group()

    if not chips:
        raise nothing_found(text, "NPU table")
    _number_unnumbered_chips(chips)
    return {"version": known_text(version), "chips": chips, "processes": processes}


def _version(lines: list[str]) -> str | None:
    """The version the title line states ("npu-smi 23.0.6  Version: 23.0.6"), read before the first header."""
    for line in lines:
        if _is_process_header(_cells(line)) or _is_chip_header(_cells(line)):
            return None
        title = _TITLE.search(line)
        if title:
            return title.group("version") or title.group("tool")
    return None


def _number_unnumbered_chips(chips: list[dict]) -> None:
    """Layouts without a chip column (the 950's) print each chip of an NPU as its own block under the same NPU
    ID: number them 0, 1, … in the order printed, so a two-chip card reads as two chips, not one twice."""
    seen: dict[int | None, int] = {}
    for chip in chips:
        if chip.pop("_unnumbered"):
            chip["chip_id"] = seen.get(chip["npu_id"], 0)
            seen[chip["npu_id"]] = chip["chip_id"] + 1


def _table_lines(text: str) -> list[str]:
    # Only lines that are part of a box count: driver noise, vNPU limiter logs and profiling lines
    # printed before the table start with neither "|" nor "+". Docstring and paste indentation and
    # trailing spaces are dropped.
    stripped = (line.strip() for line in text.expandtabs().splitlines())
    return [line for line in stripped if line.startswith(("|", "+"))]


def _cells(line: str) -> list[str]:
    inner = line[1:]
    if inner.endswith("|"):
        inner = inner[:-1]
    return [cell.strip() for cell in inner.split("|")]


def _header_names(cell: str) -> list[str]:
    return [name for name in _HEADER_GAP.split(cell) if name]


def _key(name: str) -> str:
    return name.lower().replace(" ", "")


def _is_chip_header(cells: list[str]) -> bool:
    return any(_key(cell) in ("health", "bus-id") for cell in cells)


def _is_process_header(cells: list[str]) -> bool:
    return any(_key(cell).startswith("processid") for cell in cells)


def _cell_values(cell: str, column_count: int) -> list[str]:
    """Split a data cell into as many values as its header cell has names.

    "used / total" stays one value whatever its spacing; surplus words go to the last column, so a
    name with a space ("Ascend 910A") survives; missing values are empty (unknown).
    """
    words = USED_TOTAL.sub(lambda m: f"{m.group(1)}/{m.group(2)}", cell).split()
    if column_count <= 0:
        return []
    if len(words) > column_count:
        words = words[: column_count - 1] + [" ".join(words[column_count - 1 :])]
    return words + [""] * (column_count - len(words))


def _read_row(header: list[list[str]], cells: list[str], columns: dict[str, str]) -> dict[str, str]:
    raw: dict[str, str] = {}
    for names, cell in zip(header, cells, strict=False):
        for name, value in zip(names, _cell_values(cell, len(names)), strict=True):
            field = columns.get(_key(name))
            if field is not None and field not in raw:
                raw[field] = value
    return raw


def _chips_from_rows(header: list[list[list[str]]], rows: list[list[str]]) -> list[dict]:
    """One chip per len(header) data rows (two in every known layout)."""
    per_chip = len(header) or 1
    chips = []
    for start in range(0, len(rows), per_chip):
        raw: dict[str, str] = {}
        for header_row, cells in zip(header, rows[start : start + per_chip], strict=False):
            for field, value in _read_row(header_row, cells, CHIP_COLUMNS).items():
                raw.setdefault(field, value)
        if raw:
            chips.append(_chip(raw))
    return chips


def _chip(raw: dict[str, str]) -> dict:
    hugepages_used, hugepages_total = used_total(raw.get("hugepages"))
    memory_used, memory_total = used_total(raw.get("memory"))
    hbm_used, hbm_total = used_total(raw.get("hbm"))
    return {
        "npu_id": to_int(raw.get("npu_id")),
        "chip_id": to_int(raw.get("chip_id")),
        # The 950 prints no chip number; parse_table numbers its chips per NPU.
        "_unnumbered": "chip_id" not in raw,
        "device_id": to_int(raw.get("device_id")),
        "name": known_text(raw.get("name")),
        "health": known_text(raw.get("health")),
        "power_w": to_float(raw.get("power_w")),
        "temp_c": to_number(raw.get("temp_c")),
        "hugepages_used": hugepages_used,
        "hugepages_total": hugepages_total,
        "bus_id": known_text(raw.get("bus_id")),
        "aicore_pct": to_number(raw.get("aicore_pct")),
        "memory_used_mb": memory_used,
        "memory_total_mb": memory_total,
        "hbm_used_mb": hbm_used,
        "hbm_total_mb": hbm_total,
    }


def _process_from_row(header: list[list[str]] | None, cells: list[str]) -> dict | None:
    if header is None or len(cells) < 2 or _NO_PROCESSES.search(" ".join(cells)):
        return None
    # A process name is one whole cell: it may be empty or hold spaces, so it is not split.
    raw: dict[str, str] = {}
    for names, cell in zip(header, cells, strict=False):
        if len(names) == 1:
            raw.setdefault(PROCESS_COLUMNS.get(_key(names[0]), ""), cell)
        else:
            for field, value in _read_row([names], [cell], PROCESS_COLUMNS).items():
                raw.setdefault(field, value)
    pid = to_int(raw.get("pid"))
    if pid is None:
        return None
    chip_id = to_int(raw.get("chip_id"))
    return {
        "npu_id": to_int(raw.get("npu_id")),
        "chip_id": 0 if chip_id is None and "chip_id" not in raw else chip_id,
        "pid": pid,
        "name": known_text(raw.get("name")),
        "memory_mb": to_number(raw.get("memory_mb")),
    }
