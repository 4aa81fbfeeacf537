"""Reading what docker, podman and iSula answer: versions, image lists, a container's state, pull output."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

SIZE_PATTERN = re.compile(r"^\s*([\d.]+)\s*([kKMGTP]?i?B)?\s*$")
# docker's units.HumanSize is decimal (kB, MB, GB); iSula's util_human_size_decimal too.
SIZE_UNITS = {
    "B": 1, "kB": 1000, "KB": 1000, "MB": 1000**2, "GB": 1000**3, "TB": 1000**4, "PB": 1000**5,
    "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4,
}  # fmt: skip
# docker pull, without a terminal: one status line per layer and step.
DOCKER_LAYER = re.compile(r"^(?P<layer>[0-9a-f]{12,64}): (?P<status>[A-Za-z ]+?)\s*$")
DOCKER_LAYER_DONE = ("Pull complete", "Already exists")
PODMAN_BLOB = re.compile(r"^Copying blob (?:sha256:)?(?P<blob>[0-9a-f]{12,64})(?P<rest>.*)$")


def parse_size(text: str) -> int | None:
    match = SIZE_PATTERN.match(text or "")
    if not match:
        return None
    return round(float(match.group(1)) * SIZE_UNITS.get(match.group(2) or "B", 1))


@dataclass
class EngineVersion:
    client: str = ""
    server: str = ""
    reachable: bool = False  # the daemon (or, for podman, its storage) answered
    error: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def parse_version(engine: str, exit_status: int | None, stdout: str, stderr: str) -> EngineVersion:
    """docker / podman: `version --format json`; iSula: its `version` text (Client:, Server: sections)."""
    found = EngineVersion()
    if engine == "isula":
        section = ""
        for line in stdout.splitlines():
            if line and not line.startswith(" ") and line.endswith(":"):
                section = line[:-1].strip().lower()
            elif line.strip().startswith("Version:"):
                value = line.split(":", 1)[1].strip()
                if section == "client":
                    found.client = value
                elif section == "server":
                    found.server = value
    else:
        try:
            data = json.loads(stdout.strip().splitlines()[0]) if stdout.strip() else {}
        except (ValueError, IndexError):
            data = {}
        found.client = str(((data.get("Client") or {}).get("Version")) or "")
        found.server = str(((data.get("Server") or {}).get("Version")) or "")
    # podman runs without a daemon: its answer is the proof that it works.
    found.reachable = exit_status == 0 and (bool(found.server) or engine == "podman")
    if not found.reachable:
        found.error = (stderr.strip() or stdout.strip() or f"exit status {exit_status}").splitlines()[-1][
            :300
        ]
    return found


@dataclass
class Image:
    repository: str
    tag: str
    id: str
    size_bytes: int | None = None
    created: str = ""  # ISO 8601 when the engine says, else as it printed it

    @property
    def reference(self) -> str:
        return f"{self.repository}:{self.tag}" if self.tag and self.tag != "<none>" else self.repository

    def as_dict(self) -> dict:
        return {**asdict(self), "reference": self.reference}


def split_reference(name: str) -> tuple[str, str]:
    # The tag follows the last ':' after the last '/' (a registry's port is before a '/').
    slash, colon = name.rfind("/"), name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon + 1 :]
    return name, ""


def _short_id(image_id: str) -> str:
    return image_id.removeprefix("sha256:")[:12]


def parse_images(engine: str, stdout: str) -> list[Image]:
    if engine == "docker":
        return _docker_images(stdout)
    if engine == "podman":
        return _podman_images(stdout)
    return _isula_images(stdout)


def _docker_images(stdout: str) -> list[Image]:
    images = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        images.append(
            Image(
                repository=row.get("Repository") or "<none>",
                tag=row.get("Tag") or "<none>",
                id=_short_id(row.get("ID") or ""),
                size_bytes=parse_size(row.get("Size") or ""),
                created=row.get("CreatedAt") or "",
            )
        )
    return images


def _podman_images(stdout: str) -> list[Image]:
    images = []
    for row in json.loads(stdout or "[]") or []:
        created = row.get("Created")
        when = datetime.fromtimestamp(created, UTC).isoformat() if isinstance(created, int | float) else ""
        for name in row.get("Names") or ["<none>:<none>"]:
            repository, tag = split_reference(name)
            images.append(
                Image(repository, tag or "<none>", _short_id(row.get("Id") or ""), row.get("Size"), when)
            )
    return images


def _isula_images(stdout: str) -> list[Image]:
    """REPOSITORY TAG IMAGE-ID CREATED(date time) SIZE, padded with spaces."""
    images = []
    for line in stdout.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 6:
            continue
        repository, tag, image_id, day, time = parts[:5]
        images.append(Image(repository, tag, image_id, parse_size("".join(parts[5:])), f"{day} {time}"))
    return images


@dataclass
class ContainerState:
    id: str
    name: str = ""
    image: str = ""
    status: str = ""  # created | running | exited | ... (as the engine says)
    running: bool = False
    pid: int = 0  # the container's first process, as the host numbers it
    exit_code: int | None = None
    oom_killed: bool = False
    error: str = ""
    started_at: str = ""
    finished_at: str = ""
    labels: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def parse_inspect(stdout: str) -> ContainerState | None:
    """docker and podman print a list of one record; iSula one record (or a list, in some versions)."""
    try:
        data = json.loads(stdout)
    except ValueError:
        return None
    if isinstance(data, list):
        data = data[0] if data else None
    if not isinstance(data, dict) or not data.get("Id"):
        return None
    state = data.get("State") or {}
    config = data.get("Config") or {}
    return ContainerState(
        id=str(data["Id"]),
        name=str(data.get("Name") or "").lstrip("/"),
        image=str(config.get("Image") or data.get("ImageName") or data.get("Image") or ""),
        status=str(state.get("Status") or "").lower(),
        running=bool(state.get("Running")),
        pid=int(state.get("Pid") or 0),
        exit_code=int(state["ExitCode"]) if state.get("ExitCode") is not None else None,
        oom_killed=bool(state.get("OOMKilled")),
        error=str(state.get("Error") or ""),
        started_at=str(state.get("StartedAt") or ""),
        finished_at=str(state.get("FinishedAt") or ""),
        labels={str(k): str(v) for k, v in (config.get("Labels") or {}).items()},
    )


class PullProgress:
    """Percent done of a pull from the engine's output lines; None while a line says nothing new.

    docker reports each layer ("Pulling fs layer" ... "Pull complete"); podman names each blob when it starts
    copying it and the config once all are in; iSula says only when it starts and ends. The percent is
    layers done over layers seen (90 %, the rest once the config is written), and only grows."""

    def __init__(self):
        self.layers: dict[str, bool] = {}
        self.percent = 0
        self.config = False

    def feed(self, line: str) -> int | None:
        line = line.strip()
        docker = DOCKER_LAYER.match(line)
        podman = PODMAN_BLOB.match(line)
        if docker:
            status = docker.group("status")
            done = status in DOCKER_LAYER_DONE
            self.layers[docker.group("layer")] = done or self.layers.get(docker.group("layer"), False)
        elif podman:
            # Without a terminal podman names each blob as it starts copying it, and again with "done"
            # (or "skipped: already exists") when a layer was there already.
            rest = podman.group("rest")
            blob = podman.group("blob")
            self.layers[blob] = self.layers.get(blob, False) or "done" in rest or "skipped" in rest
        elif line.startswith("Copying config") or line.startswith("Digest: sha256:"):
            self.layers = dict.fromkeys(self.layers, True)
            self.config = True
        else:
            return None
        return self._update()

    def _update(self) -> int | None:
        if not self.layers:
            return None
        done = sum(self.layers.values())
        percent = int(90 * done / len(self.layers)) + (5 if self.config else 0)
        if percent <= self.percent:
            return None
        self.percent = percent
        return percent
