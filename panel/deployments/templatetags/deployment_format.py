"""Figures on the deployment pages: parameter counts, GiB, milliseconds. Locale-aware through
django.utils.formats so 简体中文 and English pages group digits their own way."""

from django import template
from django.utils.formats import number_format

register = template.Library()
GIB = 1024**3


@register.filter
def params_count(value):
    """7615616512 → "7.6 B", 135000000 → "135 M"."""
    try:
        count = float(value)
    except (TypeError, ValueError):
        return "—"
    for size, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= size:
            return f"{number_format(count / size, 1)} {unit}"
    return number_format(count, 0)


@register.filter
def gib(value, digits=1):
    """Bytes as GiB with `digits` decimals; "—" when missing."""
    if value in (None, ""):
        return "—"
    return number_format(float(value) / GIB, int(digits))


@register.filter
def ms(seconds):
    """Seconds as milliseconds, no decimals below 10 ms only when it matters."""
    if seconds in (None, ""):
        return "—"
    value = float(seconds) * 1000
    return number_format(value, 1 if value < 10 else 0)


@register.filter
def mb_as_gib(value):
    """npu-smi's MB (really MiB) as GiB with one decimal: 65536 → "64.0"."""
    if value in (None, ""):
        return "—"
    return number_format(float(value) / 1024, 1)


@register.filter
def grouped(value):
    """A whole number with the locale's digit grouping: 113034752 → "113,034,752"."""
    if value in (None, ""):
        return "—"
    return number_format(value, 0, force_grouping=True)
