"""Durations as people write them on a command line: 90s, 10m, 1h30m, 2.5m; a bare number is seconds."""

import argparse
import re

UNITS = {"h": 3600, "m": 60, "s": 1, "": 1}
PART = re.compile(r"(\d+(?:\.\d+)?)([hms]?)")


def parse_duration(text: str) -> float:
    """Seconds in `text`; ValueError when it is not a positive duration."""
    text = text.strip().lower()
    parts = list(PART.finditer(text))
    if not parts or "".join(part.group(0) for part in parts) != text:
        raise ValueError(f"not a duration: {text!r} (write it as 90s, 10m or 1h30m)")
    if len(parts) > 1 and any(not part.group(2) for part in parts):
        raise ValueError(f"not a duration: {text!r} (each number needs its unit: 1h30m)")
    seconds = sum(float(number) * UNITS[unit] for number, unit in (part.groups() for part in parts))
    if seconds <= 0:
        raise ValueError(f"not a duration: {text!r} (it must be more than zero)")
    return seconds


def duration(text: str) -> float:
    """argparse `type=`: a bad duration is a usage error (exit 2) that names the problem."""
    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def describe(seconds: float) -> str:
    """600 → "10m", 5400 → "1h30m", 42.5 → "42.5s": how the CLI repeats a duration back."""
    if seconds != int(seconds):
        return f"{seconds:g}s"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "") + (f"{secs}s" if secs else "")
    return text or "0s"
