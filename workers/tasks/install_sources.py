"""Where an install's files come from: the panel's package store (over HTTP, checked against sha256) and
the pip index or the uploaded wheelhouse.

The panel sends, per operation, the store's candidate files as {"name", "kind", "version", "sha256",
"size", "url"} and a download token; the agent fetches only what its plan needs.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path, PurePosixPath

import httpx

from workers.i18n import gettext_noop as _
from workers.steps.base import PipSource, Step, StepContext, StepSpec

WHEEL = "wheel"
CHUNK = 1024 * 1024
DOWNLOAD_TIMEOUT_S = 60.0  # per read; a large file may take as long as it needs overall
PROBE_TIMEOUT_S = 5.0


def sha256_of(path: Path) -> str | None:
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def needed_files(plan: list[StepSpec], offered: list[dict], use_wheelhouse: bool) -> list[dict]:
    """The offered store files the plan uses: its .run packages, and every wheel when pip reads the
    wheelhouse."""
    run_names = {PurePosixPath(s.params["path"]).name for s in plan if s.kind == "run_package"}
    wants_wheels = use_wheelhouse and any(s.kind == "pip_install" for s in plan)
    return [
        f
        for f in offered
        if (f["kind"] == WHEEL and wants_wheels) or (f["kind"] != WHEEL and f["name"] in run_names)
    ]


def pip_source(pip: dict, wheelhouse: str) -> PipSource:
    """The panel's choice: {"wheelhouse": true} or {"index_url": ..., "extra_index_urls": [...]}."""
    if pip.get("wheelhouse"):
        return PipSource(wheelhouse=wheelhouse)
    return PipSource(
        index_url=pip.get("index_url") or None, extra_index_urls=tuple(pip.get("extra_index_urls") or ())
    )


def probe_index(index_url: str | None) -> bool:
    """Whether the pip index answers (PyPI's simple index when none is configured)."""
    url = (index_url or "https://pypi.org/simple/").rstrip("/") + "/"
    try:
        return httpx.get(url, timeout=PROBE_TIMEOUT_S, follow_redirects=True).status_code < 500
    except httpx.HTTPError:
        return False


class FetchPackagesStep(Step):
    """Copy the store files the plan needs to this host, each checked against its sha256 before use."""

    def __init__(self, files: list[dict], packages_dir: str, wheelhouse: str, token: str):
        super().__init__("fetch_packages", _("Fetch packages from the panel"))
        self.files, self.token = files, token
        self.packages_dir, self.wheelhouse = Path(packages_dir), Path(wheelhouse)

    def target(self, entry: dict) -> Path:
        return (self.wheelhouse if entry["kind"] == WHEEL else self.packages_dir) / entry["name"]

    def missing(self) -> list[dict]:
        return [f for f in self.files if sha256_of(self.target(f)) != f["sha256"]]

    async def check(self, ctx: StepContext) -> bool:
        return not self.missing()

    async def do(self, ctx: StepContext) -> None:
        for entry in self.missing():
            self.download(ctx, entry)

    def download(self, ctx: StepContext, entry: dict) -> None:
        target = self.target(entry)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.part")
        digest = hashlib.sha256()
        ctx.emit("log", {"step": self.name, "stream": "stdout", "line": f"GET {entry['url']}"})
        try:
            with (
                httpx.stream(
                    "GET",
                    entry["url"],
                    headers={"Authorization": f"Bearer {self.token}"},
                    timeout=DOWNLOAD_TIMEOUT_S,
                ) as response,
                partial.open("wb") as out,
            ):
                if response.status_code != 200:
                    raise self.fail(
                        _("the panel answered {status} for {name}").format(
                            status=response.status_code, name=entry["name"]
                        ),
                        hint=_(
                            "Check the file is still in the package store and that the agent reaches "
                            "the panel's URL; then resume."
                        ),
                    )
                for chunk in response.iter_bytes(CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
        except httpx.HTTPError as error:
            partial.unlink(missing_ok=True)
            raise self.fail(
                _("could not download {name}: {error}").format(name=entry["name"], error=error),
                hint=_("Check that this host reaches the panel at {url}.").format(url=entry["url"]),
            ) from error
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        if digest.hexdigest() != entry["sha256"]:
            partial.unlink(missing_ok=True)
            raise self.fail(
                _("{name} arrived with sha256 {got}, the store has {want}").format(
                    name=entry["name"], got=digest.hexdigest(), want=entry["sha256"]
                ),
                hint=_("The transfer was corrupted or the file changed; resume to download it again."),
            )
        partial.chmod(0o755 if entry["kind"] != WHEEL else 0o644)  # .run packages are executed
        os.replace(partial, target)
        line = f"{entry['name']}: {entry['size']} bytes, sha256 {entry['sha256'][:12]}… OK"
        ctx.emit("log", {"step": self.name, "stream": "stdout", "line": line})
