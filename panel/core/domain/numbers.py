"""Big counts in words a reader takes in at a glance: 113034752 tokens read "113.0 M" in English and
"1.13 亿" in 简体中文 (Chinese counts in 万 = 10⁴ and 亿 = 10⁸, not in thousands). static/js/format.js's
formatCount follows the same rule, so a figure reads the same whether the server or the browser wrote it.

Counts below COMPACT_FROM keep every digit, grouped the locale's way ("4,096")."""

from django.utils.formats import number_format
from django.utils.translation import get_language

COMPACT_FROM = 100_000
WESTERN = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K"))
MYRIAD = ((1e12, "万亿"), (1e8, "亿"), (1e4, "万"))


def units_for(language: str | None) -> tuple[tuple[float, str], ...]:
    return MYRIAD if (language or "").lower().startswith("zh") else WESTERN


def compact(value, *, units=None, start: float = COMPACT_FROM, digits: int | None = None) -> str:
    """`value` in the active language's large units: two decimals below 10 of a unit, one above
    ("2.05 M", "113.0 M", "1.13 亿"); "—" when it is missing or not a number."""
    try:
        count = float(value)
    except (TypeError, ValueError):
        return "—"
    if abs(count) >= start:
        for size, unit in units or units_for(get_language()):
            if abs(count) >= size:
                amount = count / size
                shown = digits if digits is not None else (2 if abs(amount) < 10 else 1)
                return f"{number_format(amount, shown, force_grouping=True)} {unit}"
    return number_format(round(count), 0, force_grouping=True)


GROUP_FROM = 10_000  # below, a count in running text is left as it is (a TP size, 1024, 2048)


def is_big(value) -> bool:
    """A whole number that reads better through compact(): grouped from 10,000, shortened from 100,000
    (booleans are not counts)."""
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) >= GROUP_FROM
