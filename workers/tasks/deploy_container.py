"""The container runtime's launch, stop and probe: the same deployment as workers.tasks.deploy runs as a
process, run in an image on docker, podman or iSula instead.

The panel sends the same launch spec plus {"image", "device_ids", "host_network"} under "container". The
host decides the rest from its own configuration (workers.containers.hostconf): which engine, extra mounts,
the cache folder, whether the Ascend Docker Runtime hands the NPUs over. The launch runs the process runtime's
loop (workers.tasks.deploy_launch: /health, /v1/models, then one real request) with this module's hooks;
the container's first process (its host pid) is watched.
"""

from __future__ import annotations

import logging
import shlex
from typing import Any

from workers.ascend.diagnose import diagnose_lines
from workers.containers import commands, launchplan, lifecycle
from workers.containers.detect import detect_containers
from workers.containers.hostconf import ContainerHost, HostConfigError
from workers.engine.launch.container import ContainerSpec, build_container_run
from workers.engine.launch.launch_spec import launch_spec_from_payload
from workers.engine.running import runtime
from workers.hosts.base import CommandError
from workers.hosts.local import LocalRunner
from workers.i18n import gettext_noop as _
from workers.tasks.deploy_launch import EngineLaunch, LaunchFailed, check_model_folder, engine_api_key

log = logging.getLogger(__name__)

MAX_LOG_LINES_PER_PROBE = 500
NO_ENGINE_HINT = _(
    "Install docker, podman or iSula on the node (or set ASCEND_PANEL_CONTAINER_ENGINE to the one it has), "
    "make sure its daemon runs, then inventory the node again."
)


async def choose_engine(runner, config, host: ContainerHost) -> str:
    found = await detect_containers(runner, config.host_root, host)
    if found["engine"] is None:
        seen = ", ".join(f"{e['name']} ({e['error'] or 'no answer'})" for e in found["engines"]) or "none"
        raise LaunchFailed(
            _("no container engine answers on this node (found: {seen})").format(seen=seen), NO_ENGINE_HINT
        )
    return found["engine"]


def _record_for(cspec: ContainerSpec, name: str, state) -> lifecycle.ContainerRecord:
    return lifecycle.ContainerRecord(
        name=name,
        engine=cspec.engine,
        container_id=state.id,
        container_name=state.name or cspec.name,
        image=state.image or cspec.image,
        port=cspec.launch.port,
        log_path=cspec.launch.log_path,
        argv=[],
        launch_digest=state.labels.get(commands.LABEL_LAUNCH, ""),
        host=cspec.launch.host,
        pid=state.pid,
    )


async def _stop_process_engine(emitter, runner, config, name: str, grace: float) -> None:
    """The deployment ran as a process before (its runtime changed): that engine goes first."""
    earlier = runtime.load_record(config.host_root, name)
    if earlier is not None:
        emitter.log(f"stopping the process engine pid {earlier.pid} (the deployment now runs in a container)")
        await runtime.stop_engine(runner, earlier, grace)
        runtime.forget_record(config.host_root, name)


class ContainerLaunch(EngineLaunch):
    """The engine in an image on this host's container engine (workers.containers.lifecycle)."""

    # The `logs -f` follower writes a container's last lines as it ends.
    LAST_LINES_S = 0.5

    async def prepare(self) -> lifecycle.ContainerRecord | None:
        config = self.config
        try:
            self.host = ContainerHost.from_env()
        except HostConfigError as error:
            hint = _("Fix the agent's container settings in its environment file.")
            raise LaunchFailed(str(error), hint) from error
        # The engine's API key travels sealed for this node; in the container it is VLLM_API_KEY, passed by
        # name only (never in argv), and every readiness check sends it.
        self.api_key = engine_api_key(config, self.payload)
        self.take(
            launch_spec_from_payload(
                self.payload["spec"], log_path=self.log_path, venv_path=None, api_key=self.api_key
            )
        )
        check_model_folder(config.host_root, self.spec.model_path)
        engine = await choose_engine(self.runner, config, self.host)
        self.cspec = await launchplan.container_spec(
            self.runner, config, self.host, engine, self.spec, self.payload.get("container") or {}, self.name
        )
        launchplan.check_host_paths(self.cspec)
        await launchplan.preflight_here(self.runner, config, self.cspec)
        await _stop_process_engine(self.emitter, self.runner, config, self.name, self.grace)
        adopted = await self.adopt_or_clear()
        if adopted is None and not await launchplan.image_present(self.runner, engine, self.cspec.image):
            raise LaunchFailed(
                _("the image {image} is not on this node ({engine})").format(
                    image=self.cspec.image, engine=engine
                ),
                _("Pull it on the node's Images tab, or load it there from an archive in the package store."),
            )
        return adopted

    async def adopt_or_clear(self) -> lifecycle.ContainerRecord | None:
        """A running container of this deployment with the same launch that still serves is kept, its
        record written again when it was lost; anything else of this deployment is stopped and removed."""
        cspec, name, host_root = self.cspec, self.name, self.config.host_root
        digest = dict(cspec.labels)[commands.LABEL_LAUNCH]
        for state in await lifecycle.find_labelled(self.runner, cspec.engine, name):
            record = lifecycle.load_record(host_root, name)
            if record is None or record.container_id != state.id:
                record = _record_for(cspec, name, state)
            if state.running and state.labels.get(commands.LABEL_LAUNCH) == digest:
                record.pid = state.pid  # the container's first process now, which the check watches
                if await self.still_serves(record):
                    await lifecycle.keep_following(self.runner, record)
                    lifecycle.save_record(host_root, record)
                    self.emitter.log(
                        f"engine container {state.name} ({state.id[:12]}) already runs; adopting it"
                    )
                    return record
            self.emitter.log(f"removing the earlier container {state.name} ({state.id[:12]}): {state.status}")
            if state.running:
                await lifecycle.stop(self.runner, record, self.grace)
            await lifecycle.remove(self.runner, record)
        lifecycle.forget_record(host_root, name)
        # One of another node, or made by hand, is in the way of `run --name` all the same.
        await lifecycle.remove_named(self.runner, cspec.engine, cspec.name)
        return None

    async def start(self) -> lifecycle.ContainerRecord:
        cspec, spec = self.cspec, self.spec
        run = build_container_run(cspec, self.host.passed_env())
        self.emitter.log("$ " + shlex.join(run.argv))
        record = lifecycle.ContainerRecord(
            name=self.name,
            engine=cspec.engine,
            container_id="",
            container_name=cspec.name,
            image=cspec.image,
            port=spec.port,
            log_path=self.log_path,
            argv=run.argv,
            launch_digest=dict(cspec.labels)[commands.LABEL_LAUNCH],
            host=spec.host,
        )
        try:
            record = await lifecycle.start(self.runner, self.config.host_root, record, run, cspec.env_file)
        except CommandError as error:
            detail = (error.result.stderr.strip() or error.result.stdout.strip()).splitlines()[-3:]
            raise LaunchFailed(
                _("{engine} could not start the container: {detail}").format(
                    engine=cspec.engine, detail=" ".join(detail)
                ),
                _("The engine's own message above says why (a device, a mount, the image)."),
            ) from error
        self.emitter.log(f"container {record.container_id[:12]} runs as host pid {record.pid}")
        return record

    def read_lines(self, offset: int, max_bytes: int = runtime.MAX_LOG_BYTES_PER_READ) -> tuple[list, int]:
        return lifecycle.read_lines(self.log_path, offset, max_bytes)

    async def exited(self, record):
        return await lifecycle.inspect(self.runner, record.engine, record.container_id)

    def exit_summary(self, end) -> str:
        return lifecycle.exit_summary(end)

    async def clean_up(self, record):
        _outcome, state = await lifecycle.stop(self.runner, record, self.grace)
        return state

    def extra_findings(self, end) -> list[dict]:
        return lifecycle.oom_finding(end)


async def _recorded(runner, config, name: str, known: dict) -> lifecycle.ContainerRecord | None:
    """The deployment's container: its record, what the panel knows, or (lost both) found by label."""
    record = lifecycle.load_record(config.host_root, name)
    if record is None and known.get("container_id") and known.get("engine"):
        record = lifecycle.ContainerRecord.from_dict({**_blank(name), **known, "name": name})
    if record is not None:
        return record
    try:
        engine = await choose_engine(runner, config, ContainerHost.from_env())
    except (HostConfigError, LaunchFailed):  # no engine here: nothing of this deployment can be running
        return None
    for state in await lifecycle.find_labelled(runner, engine, name):
        found = lifecycle.ContainerRecord.from_dict(
            {
                **_blank(name),
                "engine": engine,
                "container_id": state.id,
                "container_name": state.name,
                "image": state.image,
                "pid": state.pid,
                "port": int(known.get("port") or 0),
                "host": known.get("host") or "127.0.0.1",
                "launch_digest": state.labels.get(commands.LABEL_LAUNCH, ""),
                "log_path": runtime.log_path_for(config.host_root, name),
            }
        )
        lifecycle.save_record(config.host_root, found)
        return found
    return None


def _blank(name: str) -> dict:
    return {
        "name": name,
        "engine": "",
        "container_id": "",
        "container_name": lifecycle.container_name(name),
        "image": "",
        "port": 0,
        "log_path": "",
        "argv": [],
        "launch_digest": "",
    }


async def stop_container(emitter, config, payload: dict) -> dict:
    name = payload["name"]
    runner = LocalRunner()
    named = payload.get("runtime") or {}
    record = await _recorded(runner, config, name, named)
    if record is None:
        emitter.log(f"no engine container recorded for {name} on this node; nothing to stop")
        return {"outcome": "not running"}
    if named.get("container_id") and named["container_id"] != record.container_id:
        message = _(
            "the stop names container {named}, but the one recorded for {name} here is {recorded}: nothing "
            "was stopped"
        )
        raise runtime.StopRefused(
            message.format(named=named["container_id"][:12], name=name, recorded=record.container_id[:12]),
            _("The panel's record of this engine is out of date: refresh the deployment and stop it again."),
        )
    grace = float(payload.get("grace_s", 10.0))
    emitter.progress(
        10, _("Stopping the engine container (SIGTERM, SIGKILL after {grace:.0f} s)").format(grace=grace)
    )
    outcome, state = await lifecycle.stop(runner, record, grace)
    emitter.log(f"engine container {record.container_name} ({record.container_id[:12]}): {outcome}")
    result: dict[str, Any] = {"outcome": outcome, "container_id": record.container_id}
    if state is not None:
        result["exit_code"] = state.exit_code
    if payload.get("remove"):
        removed = await lifecycle.remove(runner, record)
        lifecycle.forget_record(config.host_root, name)
        emitter.log(
            f"container {record.container_id[:12]} removed" if removed else "the container was already gone"
        )
        result["removed"] = True
    return result


async def probe_container(runner, config, item: dict, scrape) -> dict:
    """What the panel's probe learns of a container engine: running, /health, new log lines, metrics, and
    for one that ended its exit code, OOM kill and the toolkit's findings."""
    name = item["name"]
    record = await _recorded(runner, config, name, item.get("runtime") or {})
    if record is None:
        return {"name": name, "recorded": False, "alive": False, "healthy": False, "lines": []}
    state = await lifecycle.inspect(runner, record.engine, record.container_id)
    alive = state is not None and state.running
    follower = bool(item.get("follower"))
    if (
        state is not None
        and alive
        and (await lifecycle.keep_following(runner, record) or record.pid != state.pid)
    ):
        record.pid = state.pid
        lifecycle.save_record(config.host_root, record)
    healthy = alive and (follower or await runtime.is_healthy(record))
    read_from = int(item.get("log_offset") or 0)
    lines, offset = lifecycle.read_lines(record.log_path, read_from)
    result = {
        "name": name,
        "recorded": True,
        "alive": alive,
        "healthy": healthy,
        "runtime": record.to_dict(),
        "log_from": read_from,
        "log_offset": offset,
        "lines": lines[-MAX_LOG_LINES_PER_PROBE:],
    }
    if healthy and not follower and item.get("scrape", True):
        text = await runtime.http_text(f"{record.base_url}/metrics")
        if text is not None:
            result["metrics"] = scrape(name, text)
    if not alive:
        result["exit"] = {
            "summary": lifecycle.exit_summary(state),
            "exit_code": state.exit_code if state else None,
            "oom_killed": bool(state and state.oom_killed),
        }
        result["findings"] = lifecycle.oom_finding(state) + diagnose_lines(
            lifecycle.tail_lines(record.log_path, 200)
        )
    return result


async def clear_container(emitter, config, payload: dict) -> None:
    """Before a process launch: the deployment ran in a container before (its runtime changed)."""
    record = lifecycle.load_record(config.host_root, payload["name"])
    if record is None:
        return
    runner = LocalRunner()
    emitter.log(
        f"removing the engine container {record.container_name} (the deployment now runs as a process)"
    )
    await lifecycle.stop(runner, record, float(payload.get("stop_grace_s", 10.0)))
    await lifecycle.remove(runner, record)
    lifecycle.forget_record(config.host_root, payload["name"])
