"""The inventory's container part: which engines this host has, their versions, whether their daemon
answers, their images, and whether the Ascend Docker Runtime is installed and which engine uses it.

The Ascend Docker Runtime installs under /usr/local/Ascend/Ascend-Docker-Runtime and registers itself in
docker's (or iSula's) daemon.json as the runtime "ascend", usually as the default runtime; then the NPUs
are handed over with ASCEND_VISIBLE_DEVICES and its hook mounts the devices and the driver.
"""

from __future__ import annotations

import json

from workers.containers import commands
from workers.containers.hostconf import ContainerHost, choose_engine
from workers.containers.parse import parse_images, parse_version
from workers.engine.launch.container import ENGINES, on_host

ADR_DIR = "/usr/local/Ascend/Ascend-Docker-Runtime"
ADR_BINARY = f"{ADR_DIR}/ascend-docker-runtime"
DAEMON_CONFIGS = {"docker": "/etc/docker/daemon.json", "isula": "/etc/isulad/daemon.json"}
NOT_INSTALLED = 127
TIMEOUT_S = 30


async def ascend_runtime_use(runner, host_root: str, engine: str) -> str:
    """How `engine` reaches the Ascend Docker Runtime: "default", "ascend" (registered) or "" (not)."""
    path = DAEMON_CONFIGS.get(engine)
    text = await runner.read_text(on_host(host_root, path)) if path else None
    try:
        config = json.loads(text) if text else {}
    except ValueError:
        return ""
    if not isinstance(config, dict) or "ascend" not in (config.get("runtimes") or {}):
        return ""
    return "default" if config.get("default-runtime") == "ascend" else "ascend"


async def ascend_docker_runtime(runner, host_root: str) -> dict:
    installed = (await runner.run(["test", "-x", on_host(host_root, ADR_BINARY)], timeout=TIMEOUT_S)).ok
    version = ""
    for name in ("version.info", "VERSION"):
        text = await runner.read_text(on_host(host_root, f"{ADR_DIR}/{name}"))
        if text and text.strip():
            version = text.strip().splitlines()[0]
            break
    return {"installed": installed, "path": ADR_DIR if installed else "", "version": version}


async def engine_images(runner, engine: str) -> tuple[list[dict], str]:
    """(images, error): what `engine` holds, or why it could not say."""
    result = await runner.run(commands.list_images(engine), timeout=TIMEOUT_S)
    if not result.ok:
        return [], (result.stderr.strip() or result.stdout.strip())[-300:]
    try:
        return [image.as_dict() for image in parse_images(engine, result.stdout)], ""
    except (ValueError, KeyError, TypeError) as error:
        return [], f"unreadable image list: {error}"


async def detect_containers(runner, host_root: str = "/", host: ContainerHost | None = None) -> dict:
    """{"engines": [{name, client, server, reachable, error, ascend_runtime, images, images_error}],
    "engine": the one engine containers run with (or None), "ascend_docker_runtime": {...}}."""
    host = host or ContainerHost.from_env()
    engines = []
    for name in ENGINES:
        result = await runner.run(commands.version(name), timeout=TIMEOUT_S)
        if result.exit_status == NOT_INSTALLED:
            continue
        found = parse_version(name, result.exit_status, result.stdout, result.stderr).as_dict()
        found.update(name=name, ascend_runtime=await ascend_runtime_use(runner, host_root, name))
        found.update(images=[], images_error="")
        if found["reachable"]:
            found["images"], found["images_error"] = await engine_images(runner, name)
        engines.append(found)
    return {
        "engines": engines,
        "engine": choose_engine(host.engine, engines),
        "ascend_docker_runtime": await ascend_docker_runtime(runner, host_root),
    }
