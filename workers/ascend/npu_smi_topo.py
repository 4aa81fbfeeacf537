"""Parse the matrix `npu-smi info -t topo` prints: how each pair of NPUs is connected, and their CPUs.

    {"devices": ["NPU0", "NPU1"], "links": {"NPU0": {"NPU0": "X", "NPU1": "HCCS"}, ...},
     "cpu_affinity": {"NPU0": "0-23", ...}}

Devices keep the names npu-smi prints: `NPU<id>` on most chips, `Phy-ID<id>` on Atlas A3 (910_93). Link
types are as printed (X, HCCS, HCCS_SW, SIO, UB, PIX, PXB, PHB, SYS, NA). Newer drivers add NIC columns and
rows (a NIC's relation to each NPU) and a `NIC0: <name>` list; NICs are not devices and are left out. The
CPU Affinity column is missing on A3 (and A5 SuperPoD) ARM hosts, whose NPUs have no single NUMA node:
`cpu_affinity` is then {}.
"""

import re

from workers.ascend.npu_smi_errors import nothing_found

_DEVICE = re.compile(r"^(?:NPU|Phy-ID)\d+$")
_NIC = re.compile(r"^NIC\d+$")
_AFFINITY_WORDS = ("CPU", "Affinity")


def _tokens(line: str) -> list[str]:
    return line.split()


def _is_header(tokens: list[str]) -> bool:
    names = [t for t in tokens if t not in _AFFINITY_WORDS]
    return (
        bool(names)
        and _DEVICE.match(names[0]) is not None
        and all(_DEVICE.match(t) or _NIC.match(t) for t in names)
    )


def parse_topo(text: str) -> dict:
    """The first topology matrix in `text`; raises NpuSmiError when there is none."""
    lines = text.expandtabs().splitlines()
    start = next((i for i, line in enumerate(lines) if _is_header(_tokens(line))), None)
    if start is None:
        raise nothing_found(text, "topology matrix")
    header = _tokens(lines[start])
    has_affinity = all(word in header for word in _AFFINITY_WORDS)
    columns = [t for t in header if t not in _AFFINITY_WORDS]
    devices = [t for t in columns if _DEVICE.match(t)]
    links: dict[str, dict[str, str]] = {}
    affinity: dict[str, str] = {}
    for line in lines[start + 1 :]:
        tokens = _tokens(line)
        if not tokens:
            continue
        name = tokens[0]
        if name not in columns:
            if links:  # the legend or the NIC name list: the matrix is over
                break
            continue
        if name not in devices:
            continue  # a NIC row
        cells = tokens[1 : 1 + len(columns)]
        links[name] = {
            column: cell for column, cell in zip(columns, cells, strict=False) if column in devices
        }
        extra = tokens[1 + len(columns) :]
        if has_affinity and extra:
            affinity[name] = extra[0]
    if not links:
        raise nothing_found(text, "topology matrix rows")
    return {"devices": devices, "links": links, "cpu_affinity": affinity}
