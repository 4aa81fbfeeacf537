"""Sizes in binary units, the way the whole panel counts memory, HBM, disks and files.

npu-smi's "MB" are MiB (a 64 GiB card reports 65536), and Django's filesizeformat counts in steps of 1024
but labels them "GB"; pages that mixed the two showed 64 GB beside 64.0 GiB for the same card. Every size
is labelled KiB, MiB, GiB or TiB, with the number in the page's locale (static/js/format.js does the same
in the browser)."""

from django import template
from django.utils.formats import number_format

register = template.Library()
UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


@register.filter
def binary_size(value):
    """Bytes as the largest binary unit that keeps the number at 1 or more: 1536 → "1.5 KiB", 68719476736 →
    "64.0 GiB"; "—" when missing."""
    if value in (None, ""):
        return "—"
    amount, unit = float(value), 0
    while abs(amount) >= 1024 and unit < len(UNITS) - 1:
        amount /= 1024
        unit += 1
    return f"{number_format(amount, 0 if unit == 0 else 1)} {UNITS[unit]}"
