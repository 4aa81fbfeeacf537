"""Turn the cell and value texts npu-smi prints into Python values.

npu-smi marks what it does not know with `NA` (not supported), `-` (A3's second die has no power
reading of its own) or nothing at all. All of these mean "unknown", which is None here, never 0:
a dashboard must not show 0 W for a die whose power is simply not reported.
"""

import re

UNKNOWN_TEXTS = frozenset({"", "NA", "N/A", "-", "--"})

_NUMBER = re.compile(r"^[+-]?\d+(\.\d+)?$")
# "used / total" as printed, with any spacing around the slash: "3360 / 65536", "65099/ 65536", "0    / 8192".
USED_TOTAL = re.compile(r"(\S+?)\s*/\s*(\S+)")


def known_text(value: str | None) -> str | None:
    """The trimmed text, or None when npu-smi printed one of its "unknown" markers."""
    if value is None:
        return None
    value = value.strip()
    return None if value in UNKNOWN_TEXTS else value


def to_number(value: str | None) -> int | float | None:
    """An int where the text is integral ("37"), a float otherwise ("93.6"), None when unknown."""
    text = known_text(value)
    if text is None or not _NUMBER.match(text):
        return None
    return float(text) if "." in text else int(text)


def to_int(value: str | None) -> int | None:
    number = to_number(value)
    return None if number is None else int(number)


def to_float(value: str | None) -> float | None:
    number = to_number(value)
    return None if number is None else float(number)


def used_total(value: str | None) -> tuple[int | None, int | None]:
    """Split "used / total" into two ints; (None, None) when the cell is absent or unreadable."""
    text = known_text(value)
    match = USED_TOTAL.fullmatch(text) if text else None
    if match is None:
        return None, None
    return to_int(match.group(1)), to_int(match.group(2))
