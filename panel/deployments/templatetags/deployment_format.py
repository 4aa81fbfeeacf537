"""Figures on the deployment pages: parameter counts, GiB, milliseconds. Locale-aware through
django.utils.formats so 简体中文 and English pages group digits their own way."""

from django import template
from django.utils.formats import number_format

from panel.core.domain.numbers import WESTERN, compact

register = template.Library()
GIB = 1024**3


@register.filter
def params_count(value):
    """Parameter counts as models are named, in any language: 7615616512 → "7.6 B", 135000000 → "135.0 M"."""
    return compact(value, units=WESTERN, start=1e3, digits=1)


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


@register.filter(name="compact")
def compact_count(value):
    """A count, shortened once it is big: 4096 → "4,096", 113034752 → "113.0 M" / "1.13 亿"."""
    return compact(value)
