"""The official vllm-ascend images (official_images.yaml) and the preflight of an image for a node.

An image of that repository names its release and variant in the tag (v0.11.0-a3-openeuler); the release
is a profile of the compatibility matrix, whose CANN decides which Ascend HDK driver the host needs (the
driver stays on the host: the image brings CANN, the host lends the driver). `preflight` lists what is
wrong with running an image on a node, each with the fix, like workers.ascend.compat does for venv stacks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from workers.ascend.compat import CHIP_NAMES, UNVERIFIED, Problem, profile_for
from workers.ascend.vercmp import VersionError
from workers.i18n import gettext_noop as _

CATALOGUE = Path(__file__).with_name("official_images.yaml")
TAG_PATTERN = re.compile(r"^v(?P<release>\d+\.\d+\.\d+(?:rc\d+)?(?:\.post\d+)?)(?P<suffix>(?:-[a-z0-9]+)*)$")


@dataclass(frozen=True)
class OfficialImage:
    reference: str
    release: str
    suffix: str
    chip: str
    os: str
    base: str
    sources: tuple[str, ...]

    def as_dict(self) -> dict:
        return {
            "reference": self.reference,
            "release": self.release,
            "variant": self.suffix.lstrip("-") or "default",
            "chip": self.chip,
            "chip_name": CHIP_NAMES.get(self.chip, self.chip),
            "os": self.os,
            "base": self.base,
            "sources": list(self.sources),
        }


@cache
def _catalogue() -> dict:
    return yaml.safe_load(CATALOGUE.read_text(encoding="utf-8"))


def repository() -> str:
    return _catalogue()["repository"]


def official_images(release: str | None = None, chip: str | None = None) -> list[OfficialImage]:
    """Every published image (newest release first), or those of one release and/or chip."""
    data = _catalogue()
    images = []
    for row in data["releases"]:
        if release is not None and row["vllm_ascend"] != release:
            continue
        for suffix in row["variants"]:
            variant = data["variants"][suffix]
            if chip is not None and variant["chip"] != chip:
                continue
            images.append(
                OfficialImage(
                    reference=f"{data['repository']}:v{row['vllm_ascend']}{suffix}",
                    release=row["vllm_ascend"],
                    suffix=suffix,
                    chip=variant["chip"],
                    os=variant["os"],
                    base=row["base"],
                    sources=tuple(row["sources"]),
                )
            )
    return images


def identify(reference: str) -> tuple[str, str] | None:
    """(release, suffix) of an official image reference, or None for any other image."""
    name, _sep, tag = reference.rpartition(":")
    if name != repository() or "/" in tag:
        return None
    match = TAG_PATTERN.fullmatch(tag)
    return (match.group("release"), match.group("suffix")) if match else None


def preflight(reference: str, *, chip: str | None, driver: str | None) -> list[Problem]:
    """What stands in the way of running `reference` on a node with this chip (matrix key, "cpu" for
    none) and Ascend HDK driver version; [] when nothing does. Images of other repositories (a site's
    own build, vllm-cpu) are not judged."""
    found = identify(reference)
    if found is None:
        return []
    release, suffix = found
    row = next((r for r in _catalogue()["releases"] if r["vllm_ascend"] == release), None)
    variants = _catalogue()["variants"]
    if row is None or suffix not in row["variants"]:
        known = ", ".join(i.reference.rpartition(":")[2] for i in official_images(chip=chip))
        return [
            Problem(
                "image",
                reference,
                known,
                _(
                    "vllm-ascend publishes no image tagged {tag} in the releases this panel knows; "
                    "use one of {known}."
                ).format(tag=reference.rpartition(":")[2], known=known or "-"),
                UNVERIFIED,
            )
        ]
    problems = []
    built_for = variants[suffix]["chip"]
    if chip is not None and chip != built_for:
        fitting = [i.reference for i in official_images(release, chip)]
        hint = _("{image} is built for {built}, this node has {chip}.").format(
            image=reference, built=CHIP_NAMES.get(built_for, built_for), chip=CHIP_NAMES.get(chip, chip)
        )
        if fitting:
            hint += " " + _("Use {images}.").format(images=" or ".join(fitting))
        problems.append(Problem("chip", chip, built_for, hint))
    profile = profile_for(release)
    if driver and profile is not None and profile.driver is not None:
        try:
            allowed = profile.driver.allows(driver)
        except VersionError:
            allowed = True  # an unreadable driver version is the inventory's problem, not this image's
        if not allowed:
            problems.append(
                Problem(
                    "driver",
                    driver,
                    profile.driver.describe(),
                    _(
                        "{image} brings CANN {cann}, which needs an Ascend HDK driver {need} on the host "
                        "({source}); upgrade the node's driver and firmware, or use an older image."
                    ).format(
                        image=reference,
                        cann=profile.cann,
                        need=profile.driver.describe(),
                        source=profile.driver.source,
                    ),
                )
            )
    return problems
