"""Parse `npu-smi info -m`: which NPU id / chip id has which chip logic id.

The logic id is what ASCEND_RT_VISIBLE_DEVICES and torch_npu count in, not the NPU id: NPU ids can
be sparse (0, 32, 96, 32768 ...) and two chips can share one NPU id (310P Duo, A3).
"""

import re

from workers.ascend.npu_smi_errors import nothing_found
from workers.ascend.npu_smi_values import known_text, to_int

# Column names hold single spaces ("Chip Logic ID"), columns are apart by two or more.
_COLUMN_GAP = re.compile(r"\s{2,}")
_COLUMNS = {"NPU ID": "npu_id", "Chip ID": "chip_id", "Chip Logic ID": "logic_id", "Chip Name": "chip_name"}


def parse_mapping(text: str) -> list[dict]:
    """`npu-smi info -m` -> [{"npu_id", "chip_id", "logic_id", "chip_name"}] in the order printed.

    MCU rows are kept with logic_id None (their logic id prints as `-`). The 950 prints no
    `Chip Logic ID` column at all, so its logic_id is None too. Raises NpuSmiError when the
    text holds no mapping row.
    """
    lines = [line.strip() for line in text.expandtabs().splitlines()]
    header_at = next(
        (i for i, line in enumerate(lines) if line.startswith("NPU ID") and "Chip" in line), None
    )
    rows = []
    if header_at is not None:
        names = _COLUMN_GAP.split(lines[header_at])
        for line in lines[header_at + 1 :]:
            values = _row_values(line, names)
            if values is not None:
                rows.append(_mapping_row(dict(zip(names, values, strict=True))))
    if not rows:
        raise nothing_found(text, "NPU / chip mapping")
    return rows


def _row_values(line: str, names: list[str]) -> list[str] | None:
    """One value per column. Only `Chip Name` may contain spaces ("Ascend 910A"), so it takes the
    words the single-word columns around it leave over."""
    words = line.split()
    if len(words) < len(names) or not words[0].isdigit():
        return None
    name_at = names.index("Chip Name") if "Chip Name" in names else len(names) - 1
    after = len(names) - 1 - name_at
    name_words = words[name_at : len(words) - after]
    return words[:name_at] + [" ".join(name_words)] + words[len(words) - after :]


def _mapping_row(values: dict[str, str]) -> dict:
    row = {field: values.get(column) for column, field in _COLUMNS.items()}
    return {
        "npu_id": to_int(row["npu_id"]),
        "chip_id": to_int(row["chip_id"]),
        "logic_id": to_int(row["logic_id"]),
        "chip_name": known_text(row["chip_name"]),
    }
