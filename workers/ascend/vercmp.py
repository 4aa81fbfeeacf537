"""Compare the version strings of the Ascend stack.

Huawei and the Python packages spell versions differently: CANN `8.3.RC2`, `8.0.RC3`, `8.5.0`,
`9.1.0-beta.3`; driver `24.1.rc1`, `23.0.7`, `25.5.0.1`; torch-npu `2.5.1.post1`,
`2.5.1.post1.dev20250528`, `2.9.0.post1+git4c901a4`; vllm-ascend `v0.9.1rc3`. One ordering covers them
all: a release candidate comes before the final release of the same numbers (`8.3.RC2` < `8.3.0`), a
post release after it, a dev build before whatever it is a dev build of, trailing `.0`s do not matter
and a `+local` suffix is ignored.
"""

from __future__ import annotations

import re
from functools import total_ordering

# Rank of each kind of version part; a plain number outranks every marker so `8.3.0` > `8.3.RC2`.
_DEV = 0
_ALPHA = 1
_BETA = 2
_RC = 3
_END = 4  # what a shorter version is padded with: after pre-releases, before post releases
_POST = 5
_NUMBER = 6

_MARKERS = {
    "dev": _DEV,
    "a": _ALPHA,
    "alpha": _ALPHA,
    "b": _BETA,
    "beta": _BETA,
    "c": _RC,
    "rc": _RC,
    "pre": _RC,
    "preview": _RC,
    "t": _RC,  # Huawei test builds such as 7.0.T10 precede the final release
    "spc": _POST,  # service packs come after the release they patch
    "post": _POST,
}

_TOKEN = re.compile(r"\d+|[a-z]+")


class VersionError(ValueError):
    """A string that holds no version at all."""


def _parts(text: str, trim_zeros: bool = True) -> tuple[tuple[int, int], ...]:
    cleaned = text.strip().lower().split("+", 1)[0]
    if cleaned.startswith("v") and cleaned[1:2].isdigit():
        cleaned = cleaned[1:]
    tokens = _TOKEN.findall(cleaned)
    if not tokens or not tokens[0].isdigit():
        raise VersionError(f"{text!r} is not a version (expected something like 8.3.RC2 or 2.5.1.post1)")
    parts: list[tuple[int, int]] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token.isdigit():
            parts.append((_NUMBER, int(token)))
            index += 1
            continue
        rank = _MARKERS.get(token, _RC)
        number = 0
        if index + 1 < len(tokens) and tokens[index + 1].isdigit():
            number = int(tokens[index + 1])
            index += 1
        parts.append((rank, number))
        index += 1
    while trim_zeros and parts and parts[-1] == (_NUMBER, 0):
        parts.pop()
    return tuple(parts)


@total_ordering
class Version:
    """A parsed version; compare with ==, <, > against another Version or a string."""

    __slots__ = ("text", "_key")

    def __init__(self, text: str):
        self.text = str(text).strip()
        self._key = _parts(self.text)

    @staticmethod
    def _coerce(other: object) -> Version:
        return other if isinstance(other, Version) else Version(str(other))

    def _cmp(self, other: object) -> int:
        """Part by part; a missing part counts as 0 against a number and as 'end' against a marker,
        so 8.5 == 8.5.0, 8.0.0 > 8.0.RC3 and 2.5.1 < 2.5.1.post1."""
        left, right = self._key, self._coerce(other)._key
        for index in range(max(len(left), len(right))):
            # The loop runs while one side has a part: at most one of the two is missing.
            if index >= len(left):
                b = right[index]
                a = (_NUMBER, 0) if b[0] == _NUMBER else (_END, 0)
            elif index >= len(right):
                a = left[index]
                b = (_NUMBER, 0) if a[0] == _NUMBER else (_END, 0)
            else:
                a, b = left[index], right[index]
            if a != b:
                return -1 if a < b else 1
        return 0

    def __eq__(self, other: object) -> bool:
        return self._cmp(other) == 0

    def __lt__(self, other: object) -> bool:
        return self._cmp(other) < 0

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"Version({self.text!r})"

    def __str__(self) -> str:
        return self.text


def compare(a: str, b: str) -> int:
    """-1, 0 or 1 as a is older than, the same as or newer than b."""
    left, right = Version(a), Version(b)
    return (left > right) - (left < right)


def same(a: str, b: str) -> bool:
    """True when a and b name the same version (`8.3.rc2` == `8.3.RC2`, `2.9.0+cpu` == `2.9.0`)."""
    return Version(a) == Version(b)


def matches_series(version: str, pattern: str) -> bool:
    """Whether version belongs to a Huawei series pattern such as `25.5.x` or `26.0.rc1`.

    `x` stands for any rest, so `25.5.x` takes 25.5.0, 25.5.1 and 25.5.0.1 but not 25.50.0; a pattern
    without `x` must match exactly.
    """
    pattern = pattern.strip().lower()
    if not pattern.endswith(".x"):
        return same(version, pattern)
    prefix = _parts(pattern[: -len(".x")], trim_zeros=False)
    have = _parts(version, trim_zeros=False)
    padded = have + ((_NUMBER, 0),) * (len(prefix) - len(have))
    return padded[: len(prefix)] == prefix


def minor_of(python_version: str) -> tuple[int, int]:
    """(3, 11) from '3.11', '3.11.9' or 'Python 3.11.9'."""
    match = re.search(r"(\d+)\.(\d+)", python_version)
    if not match:
        raise VersionError(f"{python_version!r} is not a Python version (expected X.Y)")
    return int(match.group(1)), int(match.group(2))
