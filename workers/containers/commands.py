"""Each container engine's argv for what the panel does with it, using only documented flags.

docker and podman share their CLI; iSula (openEuler's engine) differs: `version` prints text, `images`
prints a table without --format, `logs` has no --timestamps or --since, `stop` and `rm` take the same
flags. The `run` line is workers.engine.launch.container's.
"""

from __future__ import annotations

from workers.engine.launch.container import ENGINES, IMAGE_PATTERN

LABEL_DEPLOYMENT = "ascend-panel.deployment"
LABEL_NODE = "ascend-panel.node"
LABEL_LAUNCH = "ascend-panel.launch"  # a digest of the run line: a container started otherwise is not adopted


class UnknownEngine(ValueError):
    pass


def _engine(engine: str) -> str:
    if engine not in ENGINES:
        raise UnknownEngine(f"container engine must be one of {', '.join(ENGINES)}; got {engine!r}")
    return engine


def _image(reference: str) -> str:
    if not IMAGE_PATTERN.fullmatch(reference):
        raise ValueError(f"not an image reference: {reference!r}")
    return reference


def _container(ref: str) -> str:
    # A container id (hex) or name (letters, digits, _ . -): never something the CLI reads as an option.
    if not ref or ref.startswith("-") or not all(c.isalnum() or c in "_.-" for c in ref):
        raise ValueError(f"not a container id or name: {ref!r}")
    return ref


def version(engine: str) -> list[str]:
    if _engine(engine) == "isula":
        return ["isula", "version"]
    if engine == "docker":
        return ["docker", "version", "--format", "{{json .}}"]
    return ["podman", "version", "--format", "json"]


def list_images(engine: str) -> list[str]:
    if _engine(engine) == "isula":
        return ["isula", "images"]
    if engine == "docker":
        return ["docker", "images", "--no-trunc", "--format", "{{json .}}"]
    return ["podman", "images", "--format", "json"]


def pull(engine: str, reference: str) -> list[str]:
    return [_engine(engine), "pull", _image(reference)]


def load(engine: str, archive: str) -> list[str]:
    if not archive.startswith("/"):
        raise ValueError(f"give the archive as an absolute path; got {archive!r}")
    return [_engine(engine), "load", "-i", archive]


def remove_image(engine: str, reference: str) -> list[str]:
    return [_engine(engine), "rmi", _image(reference)]


def inspect(engine: str, ref: str) -> list[str]:
    """The container's whole record as JSON (docker and podman: a list of one; iSula: one object)."""
    if _engine(engine) == "isula":
        return ["isula", "inspect", _container(ref)]
    return [engine, "inspect", "--type", "container", _container(ref)]


def find_by_label(engine: str, key: str, value: str) -> list[str]:
    """Ids of every container, running or not, labelled key=value."""
    return [_engine(engine), "ps", "-a", "-q", "--no-trunc", "--filter", f"label={key}={value}"]


def stop(engine: str, ref: str, grace_s: float) -> list[str]:
    """SIGTERM (the image's stop signal), SIGKILL after grace_s."""
    return [_engine(engine), "stop", "-t", str(max(0, int(grace_s))), _container(ref)]


def kill(engine: str, ref: str) -> list[str]:
    return [_engine(engine), "kill", _container(ref)]


def remove(engine: str, ref: str) -> list[str]:
    return [_engine(engine), "rm", "-f", _container(ref)]


def logs(engine: str, ref: str, *, follow: bool = True, since: str | None = None) -> list[str]:
    """Its output from the start (or from `since`, an RFC 3339 time); docker and podman prefix each line
    with its time (--timestamps), iSula cannot (the follower stamps its lines as they arrive)."""
    argv = [_engine(engine), "logs"]
    if follow:
        argv.append("-f")
    if engine != "isula":
        argv.append("--timestamps")
        if since:
            argv += ["--since", since]
    elif since:
        argv += ["--tail", "0"]  # iSula has no --since: only what comes from now on
    return [*argv, _container(ref)]


def tag(engine: str, source: str, target: str) -> list[str]:
    return [_engine(engine), "tag", _image(source), _image(target)]
