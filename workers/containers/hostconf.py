"""How this host runs engine containers: the agent's own configuration (its environment), never a message.

ASCEND_PANEL_CONTAINER_ENGINE  docker | podman | isula; default: the first of docker, isula, podman
                               that answers
ASCEND_PANEL_CONTAINER_MOUNTS  more bind mounts for every engine container, comma-separated
                               SOURCE[:TARGET][:ro|rw] (read-only unless :rw), e.g. a site's own
                               driver tools, or (tests) the engine's interpreter
ASCEND_PANEL_CONTAINER_ENV     names of this agent's environment variables handed to engine containers
                               by name (proxies, HF_ENDPOINT, a simulated host's root)
ASCEND_PANEL_CONTAINER_CACHE   node path mounted read-write at /root/.cache (default
                               /var/lib/ascend-panel/cache; empty for none)
ASCEND_PANEL_CONTAINER_SHM     --shm-size of engine containers (default 16g)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from workers.engine.launch.container import ENGINES, Mount

DEFAULT_CACHE = "/var/lib/ascend-panel/cache"
DEFAULT_SHM = "16g"
PREFERENCE = ("docker", "isula", "podman")  # the engines Ascend sites run, most common first


class HostConfigError(ValueError):
    """The agent's container settings are wrong; the message names the variable."""


@dataclass(frozen=True)
class ContainerHost:
    engine: str = ""  # "" = choose the first that answers
    mounts: tuple[Mount, ...] = ()
    env_names: tuple[str, ...] = ()
    cache_dir: str | None = DEFAULT_CACHE
    shm_size: str = DEFAULT_SHM

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> ContainerHost:
        env = os.environ if environ is None else environ
        engine = env.get("ASCEND_PANEL_CONTAINER_ENGINE", "").strip()
        if engine and engine not in ENGINES:
            raise HostConfigError(f"ASCEND_PANEL_CONTAINER_ENGINE must be one of {', '.join(ENGINES)}")
        cache = env.get("ASCEND_PANEL_CONTAINER_CACHE", DEFAULT_CACHE).strip()
        return cls(
            engine=engine,
            mounts=parse_mounts(env.get("ASCEND_PANEL_CONTAINER_MOUNTS", "")),
            env_names=tuple(n for n in env.get("ASCEND_PANEL_CONTAINER_ENV", "").replace(",", " ").split()),
            cache_dir=cache or None,
            shm_size=env.get("ASCEND_PANEL_CONTAINER_SHM", DEFAULT_SHM).strip() or DEFAULT_SHM,
        )

    def passed_env(self, environ: dict[str, str] | None = None) -> dict[str, str]:
        env = os.environ if environ is None else environ
        return {name: env[name] for name in self.env_names if name in env}


def parse_mounts(text: str) -> tuple[Mount, ...]:
    mounts = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        parts = item.split(":")
        mode = "ro"
        if parts[-1] in ("ro", "rw") and len(parts) > 1:
            mode = parts.pop()
        if len(parts) not in (1, 2) or not all(p.startswith("/") for p in parts):
            raise HostConfigError(
                f"ASCEND_PANEL_CONTAINER_MOUNTS: {item!r} is not SOURCE[:TARGET][:ro|rw] with absolute paths"
            )
        mounts.append(Mount(parts[0], parts[-1], read_only=mode == "ro"))
    return tuple(mounts)


def choose_engine(configured: str, engines: list[dict]) -> str | None:
    """The engine to use: the configured one, else the first of PREFERENCE that answered."""
    reachable = [e["name"] for e in engines if e.get("reachable")]
    if configured:
        return configured if configured in reachable else None
    return next((name for name in PREFERENCE if name in reachable), None)
