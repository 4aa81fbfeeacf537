"""Readers of what an NPU's health looks like in the field: `npu-smi info -t health -i N [-c C]`,
`npu-smi info -t ecc -i N`, a device that is gone, and (beside workers.ascend.hccn) a RoCE port's link
state and how often it came up.

    health = parse_health(text)   # {"health": "Alarm", "error_codes": ["80E18402"], "information": [...]}
    ecc = parse_ecc(text)         # {"hbm_single": 0, "hbm_double": 3, ..., "ddr_single": None, ...}
    delta = ecc_delta(before, ecc)  # what grew since `before` (a counter that went down was cleared)
    device_gone(text)             # True for "device does not exist" answers and Health UNKNOWN

Formats, from the npu-smi print routines (github.com/verylucky01/driver,
src/custom/dev_prod/user/npucli/src/npu_info_print.c) and Huawei's manual pages:
- health: `Health Status` (910A/B, 310P) or `Health` (950); the word is OK, Warning, Alarm, Critical or
  UNKNOWN ("the device does not exist or is not started"). `Error Code` prints every current code as
  ` %04X` (so 8 hex digits for a driver event id), space-separated on one line; `Error Information` prints
  one text per code, each further one on a line of its own whose key is blank. Older drivers print no
  `Error Information` line.
- ecc: `HBM Single Bit Error Count`, `HBM Double Bit Error Count`, `... Aggregate Total Err Cnt` (lifetime),
  `... Isolated Pages Count`, 950 adds `... Next-Isolated Pages Count`; DDR chips print the same keys with
  `DDR`, and 310 / 310B print `Single-bit Error Count` / `Double-bit Error Count` (their DDR). Keys are
  padded to 40 columns. Counters stop at 4294967295.
Every reader raises NpuSmiError for a text that holds neither what it reads nor a known npu-smi failure.
"""

import re

from workers.ascend.npu_fault_codes import normalise
from workers.ascend.npu_smi_errors import NpuSmiError, find_error, nothing_found
from workers.ascend.npu_smi_values import known_text, to_int
from workers.i18n import gettext_noop as _

HEALTH_WORDS = ("OK", "Warning", "Alarm", "Critical", "UNKNOWN")
ECC_MAX = 4294967295

# One `key : value` line; the key may be blank (a further Error Information line).
_LINE = re.compile(r"^\s*(?P<key>[A-Za-z][\w .()%/+-]*?|)\s*:\s?(?P<value>.*?)\s*$")
_CODE = re.compile(r"^(?:0[xX])?[0-9A-Fa-f]{4,16}$")
# How npu-smi (and hccn_tool) say that the device asked for is not there. -8008 is DCMI's
# DCMI_ERR_CODE_DEVICE_NOT_EXIST (dcmi_interface_api.h: DCMI_ERROR_CODE_BASE -8000, minus 8).
_GONE = re.compile(
    r"device (?:does not exist|is not exist|not found|not exist)|no such device|ret is -8008\b",
    re.I,
)

# ECC field -> the keys npu-smi prints for it (first found wins).
ECC_FIELDS = {
    "hbm_single": ("HBM Single Bit Error Count",),
    "hbm_double": ("HBM Double Bit Error Count",),
    "hbm_single_total": ("HBM Single Bit Aggregate Total Err Cnt",),
    "hbm_double_total": ("HBM Double Bit Aggregate Total Err Cnt",),
    "hbm_single_isolated_pages": ("HBM Single Bit Isolated Pages Count",),
    "hbm_double_isolated_pages": ("HBM Double Bit Isolated Pages Count",),
    "hbm_double_next_isolated_pages": ("HBM Double Bit Next-Isolated Pages Count",),
    "ddr_single": ("DDR Single Bit Error Count", "Single-bit Error Count"),
    "ddr_double": ("DDR Double Bit Error Count", "Double-bit Error Count"),
    "ddr_single_total": ("DDR Single Bit Aggregate Total Err Cnt",),
    "ddr_double_total": ("DDR Double Bit Aggregate Total Err Cnt",),
    "ddr_double_isolated_pages": ("DDR Double Bit Isolated Pages Count",),
}


def _key(name: str) -> str:
    return re.sub(r"[\s_-]+", "", name).lower()


def _pairs(text: str) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for line in text.splitlines():
        match = _LINE.match(line)
        if match and (match["key"] or pairs):
            pairs.append((match["key"].strip(), match["value"]))
    return pairs


def device_gone(text: str) -> bool:
    """Whether the answer says the device is not there (or npu-smi shows it as UNKNOWN)."""
    if _GONE.search(text):
        return True
    return any(_key(key) in ("healthstatus", "health") and value == "UNKNOWN" for key, value in _pairs(text))


def parse_health(text: str) -> dict:
    """`npu-smi info -t health -i N [-c C]` -> {"npu_id", "health", "error_codes", "information"}.

    `health` is the word as printed (None for NA); `error_codes` upper-case hex without 0x, in order;
    `information` the texts printed for them (may be shorter: older drivers print none).
    """
    pairs = _pairs(text)
    result: dict = {"npu_id": None, "health": None, "error_codes": [], "information": []}
    last = None
    found = False
    for key, value in pairs:
        name = _key(key) or last
        if name in ("healthstatus", "health"):
            result["health"], found = known_text(value), True
        elif name == "errorcode":
            words = re.split(r"[\s,;]+", value)
            result["error_codes"] += [normalise(word) for word in words if _CODE.match(word)]
            found = True
        elif name == "errorinformation":
            if known_text(value) is not None:
                result["information"].append(value)
        elif name == "npuid":
            result["npu_id"] = to_int(value)
        if key:
            last = _key(key)
    if not found:
        if device_gone(text):
            raise NpuSmiError(_("the device does not exist"), _("The chip no longer answers: check dmesg."))
        raise nothing_found(text, "health status")
    return result


def parse_ecc(text: str) -> dict:
    """`npu-smi info -t ecc -i N` -> {field: count or None} for every field of ECC_FIELDS (None: not
    printed by this chip, or NA), plus "npu_id". Raises NpuSmiError when no ECC key is in the text."""
    by_key = {_key(key): value for key, value in _pairs(text) if key}
    counts: dict = {"npu_id": to_int(by_key.get("npuid"))}
    found = False
    for field, names in ECC_FIELDS.items():
        value = next((by_key[_key(name)] for name in names if _key(name) in by_key), None)
        found = found or value is not None
        number = to_int(value)
        counts[field] = None if number is None or not 0 <= number <= ECC_MAX else number
    if not found:
        error = find_error(text)
        if error is not None:
            raise error
        raise nothing_found(text, "ECC counts")
    return counts


def parse_ecc_chips(text: str) -> dict[int | None, dict]:
    """`npu-smi info -t ecc -i N` of an NPU with several chips: {chip id: counts}. Each chip's block ends
    with its `Chip ID` line, as in -t usages; a text without one gives {None: counts}."""
    chips: dict[int | None, dict] = {}
    block: list[str] = []
    for line in text.splitlines():
        match = _LINE.match(line)
        if match and _key(match["key"]) == "chipid":
            if any(_key(m["key"]) in _ECC_KEYS for m in map(_LINE.match, block) if m):
                chips[to_int(match["value"])] = parse_ecc("\n".join(block))
            block = []
        else:
            block.append(line)
    if not chips:
        return {None: parse_ecc(text)}
    return chips


_ECC_KEYS = {_key(name) for names in ECC_FIELDS.values() for name in names}


def ecc_delta(before: dict | None, now: dict) -> dict:
    """How much each ECC counter grew from `before` to `now` ({field: int}, only fields both have).

    A counter lower than before was cleared (`npu-smi clear -t ecc-info`) or the chip was reset: what it
    shows now is all new. No `before` (the first sample) gives no growth."""
    if before is None:
        return {}
    delta = {}
    for field in ECC_FIELDS:
        old, new = before.get(field), now.get(field)
        if old is None or new is None:
            continue
        delta[field] = new - old if new >= old else new
    return delta


def link_flaps(before: int | None, now: int | None) -> int:
    """How many times the port came up again between two `hccn_tool -i N -link_stat -g` readings
    (`link up count`); a counter lower than before was reset with the driver: its value is all new."""
    if before is None or now is None:
        return 0
    return now - before if now >= before else now
