"""Images on a node: pull (with progress, from a registry or a mirror), load an archive from the panel's
package store (its sha256 checked before the engine reads it), remove.

A mirror pull fetches mirror/ascend/vllm-ascend:v0.11.0 and tags it as the official name too, so the
deployment names one image whichever way it reached the node. A load compares the engine's image list
before and after, which names what the archive held on every engine (their "Loaded image" lines differ).
"""

from __future__ import annotations

from pathlib import Path

from workers.containers import commands
from workers.containers.detect import engine_images
from workers.containers.parse import PullProgress
from workers.i18n import gettext_noop as _
from workers.tasks.install_sources import sha256_of

PULL_TIMEOUT_S = 6 * 3600  # a 15 GB image over a slow mirror
LOAD_TIMEOUT_S = 2 * 3600


class ImageTaskFailed(Exception):
    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


def _tail(result) -> str:
    text = result.stderr.strip() or result.stdout.strip()
    return " ".join(text.splitlines()[-3:])[:500]


async def pull(runner, engine: str, image: str, source: str, progress, log) -> None:
    """Pull `source` (the image itself, or its name on a mirror), then tag it as `image`."""
    tracker = PullProgress()

    def on_line(_stream: str, line: str) -> None:
        log(line)
        percent = tracker.feed(line)
        if percent is not None:
            layers = len(tracker.layers)
            progress(
                percent,
                _("Pulling {image}: {done} of {layers} layers").format(
                    image=source, done=sum(tracker.layers.values()), layers=layers
                ),
            )

    progress(2, _("Pulling {image}").format(image=source))
    result = await runner.run(commands.pull(engine, source), timeout=PULL_TIMEOUT_S, on_line=on_line)
    if not result.ok:
        raise ImageTaskFailed(
            _("{engine} could not pull {image}: {error}").format(
                engine=engine, image=source, error=_tail(result)
            ),
            _(
                "Check that the node reaches the registry (or set the panel's image mirror, "
                "PANEL_IMAGE_MIRROR) and that the tag exists; an air-gapped node loads the image from the "
                "package store instead."
            ),
        )
    if source != image:
        tagged = await runner.run(commands.tag(engine, source, image), timeout=60)
        if not tagged.ok:
            raise ImageTaskFailed(
                _("could not tag {source} as {image}: {error}").format(
                    source=source, image=image, error=_tail(tagged)
                )
            )
        log(f"tagged {source} as {image}")


async def load(runner, engine: str, archive: Path, sha256: str, progress, log) -> list[str]:
    """Load an image archive whose checksum must be sha256; returns the references it added or changed."""
    progress(60, _("Checking {name} against its SHA-256").format(name=archive.name))
    actual = sha256_of(archive)
    if actual != sha256:
        raise ImageTaskFailed(
            _("{name} has sha256 {got}, the package store has {want}").format(
                name=archive.name, got=actual, want=sha256
            ),
            _("The archive changed on the node; load it again to fetch a fresh copy."),
        )
    before = {(i["reference"], i["id"]) for i in (await engine_images(runner, engine))[0]}
    progress(70, _("Loading {name} into {engine}").format(name=archive.name, engine=engine))
    result = await runner.run(
        commands.load(engine, str(archive)), timeout=LOAD_TIMEOUT_S, on_line=lambda _s, line: log(line)
    )
    if not result.ok:
        raise ImageTaskFailed(
            _("{engine} could not load {name}: {error}").format(
                engine=engine, name=archive.name, error=_tail(result)
            ),
            _("Make sure the archive was written by `docker save` / `podman save` / `isula save`."),
        )
    after = (await engine_images(runner, engine))[0]
    loaded = sorted({i["reference"] for i in after if (i["reference"], i["id"]) not in before})
    log("loaded: " + (", ".join(loaded) or "images already present, unchanged"))
    return loaded


async def remove(runner, engine: str, image: str, log) -> None:
    result = await runner.run(commands.remove_image(engine, image), timeout=300)
    if not result.ok:
        raise ImageTaskFailed(
            _("{engine} could not remove {image}: {error}").format(
                engine=engine, image=image, error=_tail(result)
            ),
            _("A container still uses it (`{engine} ps -a`), or it is not on this node.").format(
                engine=engine
            ),
        )
    log(f"removed {image}")
