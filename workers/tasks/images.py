"""Agent tasks for a node's container images: list, pull, load from the package store, remove.

Each is an operation whose result carries the node's container facts afterwards (engines and images, as
the inventory reports them), so the panel's view of the node is current when the operation ends.
"""

from __future__ import annotations

from pathlib import Path

from workers.containers import images
from workers.containers.detect import detect_containers
from workers.containers.hostconf import ContainerHost
from workers.hosts.sync_loop import run_coroutine_sync
from workers.i18n import gettext_noop as _
from workers.models.node_paths import host_path
from workers.steps.base import StepContext
from workers.task_names import AGENT_LIST_IMAGES, AGENT_LOAD_IMAGE, AGENT_PULL_IMAGE, AGENT_REMOVE_IMAGE
from workers.tasks.base import agent_task
from workers.tasks.install_sources import FetchPackagesStep
from workers.tasks.operation import run_operation

ARCHIVES = "/var/lib/ascend-panel/images"
NO_ENGINE_HINT = _("Install docker, podman or iSula on the node and start its daemon, then try again.")


async def _engine(runner, config) -> tuple[str, dict]:
    found = await detect_containers(runner, config.host_root, ContainerHost.from_env())
    if found["engine"] is None:
        raise images.ImageTaskFailed(_("no container engine answers on this node"), NO_ENGINE_HINT)
    return found["engine"], found


async def _facts(runner, config) -> dict:
    return await detect_containers(runner, config.host_root, ContainerHost.from_env())


def _run(operation_id: str, body, target: dict | None) -> None:
    def task(emitter, config):
        async def inner():
            runner = config.runner()
            try:
                return await body(emitter, config, runner)
            finally:
                await runner.close()

        return run_coroutine_sync(inner())

    run_operation(operation_id, 0, task, target=target)


@agent_task(AGENT_LIST_IMAGES)
def list_images(operation_id: str, start_seq: int = 0, target: dict | None = None) -> None:
    async def body(emitter, config, runner):
        found = await _facts(runner, config)
        for engine in found["engines"]:
            state = f"{engine['server'] or engine['client']}" if engine["reachable"] else engine["error"]
            emitter.log(f"{engine['name']}: {state}; {len(engine['images'])} images")
        return {"containers": found}

    _run(operation_id, body, target)


@agent_task(AGENT_PULL_IMAGE)
def pull_image(operation_id: str, payload: dict, start_seq: int = 0, target: dict | None = None) -> None:
    async def body(emitter, config, runner):
        engine, _found = await _engine(runner, config)
        image = payload["image"]
        await images.pull(
            runner, engine, image, payload.get("source") or image, emitter.progress, emitter.log
        )
        emitter.progress(100, _("Pulled {image}").format(image=image))
        return {"image": image, "engine": engine, "containers": await _facts(runner, config)}

    _run(operation_id, body, target)


@agent_task(AGENT_LOAD_IMAGE)
def load_image(operation_id: str, payload: dict, start_seq: int = 0, target: dict | None = None) -> None:
    """payload: {"file": {name, kind, sha256, size, url}, "download_token"}: fetched from the panel's
    package store (sha256 checked), loaded, then deleted from the node (the store keeps it)."""

    async def body(emitter, config, runner):
        engine, _found = await _engine(runner, config)
        entry = payload["file"]
        folder = host_path(config.host_root, ARCHIVES)
        fetch = FetchPackagesStep([entry], str(folder), str(folder), payload["download_token"])

        def emit(kind: str, data: dict) -> None:
            if kind == "log":
                emitter.log(data.get("line", ""))

        ctx = StepContext(runner=runner, emit=emit, work_dir=str(folder))
        emitter.progress(5, _("Fetching {name} from the package store").format(name=entry["name"]))
        if not await fetch.check(ctx):
            fetch.download(ctx, entry)
        archive = Path(fetch.target(entry))
        try:
            loaded = await images.load(
                runner, engine, archive, entry["sha256"], emitter.progress, emitter.log
            )
        finally:
            archive.unlink(missing_ok=True)
        emitter.progress(100, _("Loaded {name}").format(name=entry["name"]))
        return {"loaded": loaded, "engine": engine, "containers": await _facts(runner, config)}

    _run(operation_id, body, target)


@agent_task(AGENT_REMOVE_IMAGE)
def remove_image(operation_id: str, payload: dict, start_seq: int = 0, target: dict | None = None) -> None:
    async def body(emitter, config, runner):
        engine, _found = await _engine(runner, config)
        await images.remove(runner, engine, payload["image"], emitter.log)
        return {"image": payload["image"], "engine": engine, "containers": await _facts(runner, config)}

    _run(operation_id, body, target)
