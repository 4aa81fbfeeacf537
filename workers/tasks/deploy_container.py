"""The container runtime's launch, stop and probe: the same deployment as workers.tasks.deploy runs as a
process, run in an image on docker, podman or iSula instead.

The panel sends the same launch spec plus {"image", "device_ids", "host_network"} under "container". The
host decides the rest from its own configuration (workers.containers.hostconf): which engine, extra mounts,
the cache folder, whether the Ascend Docker Runtime hands the NPUs over. Readiness is the process runtime's:
/health, /v1/models, then one real request; the container's first process (its host pid) is watched.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import time

from workers.ascend.diagnose import diagnose_lines
from workers.containers import commands, launchplan, lifecycle
from workers.containers.detect import detect_containers
from workers.containers.hostconf import ContainerHost, HostConfigError
from workers.engine import readiness, runtime
from workers.engine.container import ContainerSpec, build_container_run
from workers.engine.launch_spec import launch_spec_from_payload
from workers.engine.logstages import STAGE_TITLES, StartupProgress, relay_startup_lines
from workers.hosts.base import CommandError
from workers.hosts.local import LocalRunner
from workers.i18n import gettext_noop as _

log = logging.getLogger(__name__)

DEFAULT_START_TIMEOUT_S = 1200.0
FOLLOWER_SETTLE_S = 3.0
MAX_LOG_LINES_PER_PROBE = 500
NO_ENGINE_HINT = _(
    "Install docker, podman or iSula on the node (or set ASCEND_PANEL_CONTAINER_ENGINE to the one it has), "
    "make sure its daemon runs, then inventory the node again."
)


def _fail(message: str, hint: str = "") -> Exception:
    # The process runtime's LaunchFailed, so run_operation reports message and hint the same way.
    from workers.tasks.deploy import LaunchFailed  # deploy imports this module

    return LaunchFailed(message, hint)


async def choose_engine(runner, config, host: ContainerHost) -> str:
    found = await detect_containers(runner, config.host_root, host)
    if found["engine"] is None:
        seen = ", ".join(f"{e['name']} ({e['error'] or 'no answer'})" for e in found["engines"]) or "none"
        raise _fail(
            _("no container engine answers on this node (found: {seen})").format(seen=seen), NO_ENGINE_HINT
        )
    return found["engine"]


def _findings(log_path: str, start_offset: int, state=None) -> tuple[list[dict], list[str]]:
    tail = lifecycle.read_lines(log_path, start_offset, max_bytes=4 * 1024 * 1024)[0][-400:]
    return lifecycle.oom_finding(state) + diagnose_lines(tail), tail


def _report_failure(emitter, log_path: str, start_offset: int, state=None, fallback_hint: str = "") -> str:
    findings, tail = _findings(log_path, start_offset, state)
    emitter.emit("result", findings=findings, log_tail=tail[-40:])
    if findings:
        return findings[0]["hint"]
    return fallback_hint or _("Read the engine log above for the first error.")


async def _first_request(emitter, runner, record, served_name: str, api_key: str) -> readiness.FirstRequest:
    emitter.log(f"first request: one token of {served_name} (/health alone does not show the model runs)")
    check = await readiness.check_first_request(
        runner, record.pid, record.base_url, served_name, api_key=api_key
    )
    emitter.log("first request: answered" if check.ok else f"first request failed: {check.detail}")
    return check


async def _adopt_or_clear(
    emitter, runner, config, cspec: ContainerSpec, name: str, follower: bool, grace: float
):
    """A running container of this deployment with the same launch that still serves (with the key the
    panel holds now: one started with another key is started again) is kept, its record written again
    when it was lost; anything else of this deployment is stopped and removed."""
    digest = dict(cspec.labels)[commands.LABEL_LAUNCH]
    api_key = cspec.launch.api_key
    for state in await lifecycle.find_labelled(runner, cspec.engine, name):
        record = lifecycle.load_record(config.host_root, name)
        if record is None or record.container_id != state.id:
            record = _record_for(cspec, name, state)
        if state.running and state.labels.get(commands.LABEL_LAUNCH) == digest:
            serves = follower or (
                await runtime.is_healthy(record)
                and (
                    await _first_request(emitter, runner, record, cspec.launch.served_model_name, api_key)
                ).ok
            )
            if serves:
                record.pid = state.pid
                await lifecycle.keep_following(runner, record)
                lifecycle.save_record(config.host_root, record)
                emitter.log(f"engine container {state.name} ({state.id[:12]}) already runs; adopting it")
                return record
        emitter.log(f"removing the earlier container {state.name} ({state.id[:12]}): {state.status}")
        if state.running:
            await lifecycle.stop(runner, record, grace)
        await lifecycle.remove(runner, record)
    lifecycle.forget_record(config.host_root, name)
    await lifecycle.remove_named(runner, cspec.engine, cspec.name)  # one of another node or hand-made
    return None


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


async def launch_container(emitter, config, payload: dict) -> dict:
    # deploy imports this module
    from workers.tasks.deploy import _check_model_folder, _log_size, engine_api_key, refuse_taken_port

    name = payload["name"]
    runner = LocalRunner()
    grace = float(payload.get("stop_grace_s", 10.0))
    try:
        host = ContainerHost.from_env()
    except HostConfigError as error:
        raise _fail(str(error), _("Fix the agent's container settings in its environment file.")) from error
    log_path = runtime.log_path_for(config.host_root, name)
    # The engine's API key travels sealed for this node; in the container it is VLLM_API_KEY, passed by
    # name only (never in argv), and every readiness check sends it.
    api_key = engine_api_key(config, payload)
    spec = launch_spec_from_payload(payload["spec"], log_path=log_path, venv_path=None, api_key=api_key)
    follower = spec.multi_node is not None and spec.multi_node.role == "follower"
    _check_model_folder(config.host_root, spec.model_path)
    engine = await choose_engine(runner, config, host)
    cspec = await launchplan.container_spec(
        runner, config, host, engine, spec, payload.get("container") or {}, name
    )
    launchplan.check_host_paths(cspec)
    await launchplan.preflight_here(runner, config, cspec)
    await _stop_process_engine(emitter, runner, config, name, grace)
    adopted = await _adopt_or_clear(emitter, runner, config, cspec, name, follower, grace)
    if adopted is not None:
        emitter.progress(100, STAGE_TITLES["ready"], stage_key="ready")
        return {"runtime": {**adopted.to_dict(), "adopted": True}}
    if not await launchplan.image_present(runner, engine, cspec.image):
        raise _fail(
            _("the image {image} is not on this node ({engine})").format(image=cspec.image, engine=engine),
            _("Pull it on the node's Images tab, or load it there from an archive in the package store."),
        )
    if not follower:
        refuse_taken_port(spec)
    run = build_container_run(cspec, host.passed_env())
    emitter.log("$ " + shlex.join(run.argv))
    start_offset = _log_size(log_path)
    record = lifecycle.ContainerRecord(
        name=name,
        engine=engine,
        container_id="",
        container_name=cspec.name,
        image=cspec.image,
        port=spec.port,
        log_path=log_path,
        argv=run.argv,
        launch_digest=dict(cspec.labels)[commands.LABEL_LAUNCH],
        host=spec.host,
    )
    try:
        record = await lifecycle.start(runner, config.host_root, record, run, cspec.env_file)
    except CommandError as error:
        detail = (error.result.stderr.strip() or error.result.stdout.strip()).splitlines()[-3:]
        raise _fail(
            _("{engine} could not start the container: {detail}").format(
                engine=engine, detail=" ".join(detail)
            ),
            _("The engine's own message above says why (a device, a mount, the image)."),
        ) from error
    emitter.log(f"container {record.container_id[:12]} runs as host pid {record.pid}")
    emitter.progress(1, STAGE_TITLES["starting"], stage_key="starting", runtime=record.to_dict())
    return await _wait_ready(emitter, runner, config, payload, spec, record, start_offset, follower, grace)


async def _wait_ready(emitter, runner, config, payload, spec, record, start_offset, follower, grace) -> dict:
    progress = StartupProgress()
    started = time.monotonic()
    timeout = float(payload.get("start_timeout_s") or DEFAULT_START_TIMEOUT_S)
    interval = float(payload.get("health_interval_s") or 0.5)
    offset = start_offset

    def relay() -> None:
        nonlocal offset
        lines, offset = lifecycle.read_lines(record.log_path, offset)
        relay_startup_lines(emitter, progress, lines)

    while True:
        relay()
        if not await runner.is_alive(record.pid):
            await asyncio.sleep(0.5)  # the follower writes the last lines as the container ends
            relay()
            state = await lifecycle.inspect(runner, record.engine, record.container_id)
            hint = _report_failure(emitter, record.log_path, start_offset, state)
            raise _fail(
                _("the engine exited during start-up: {why}").format(why=lifecycle.exit_summary(state)), hint
            )
        if follower:
            if time.monotonic() - started >= FOLLOWER_SETTLE_S:
                break
        elif await runtime.is_healthy(record) and await runtime.serves_model(
            record, spec.served_model_name, spec.api_key
        ):
            break
        if time.monotonic() - started > timeout:
            hint = _report_failure(emitter, record.log_path, start_offset)
            await lifecycle.stop(runner, record, grace)
            raise _fail(
                _("the engine did not answer /health within {seconds:.0f} s").format(seconds=timeout), hint
            )
        await asyncio.sleep(interval)
    if not follower:
        check = await _first_request(emitter, runner, record, spec.served_model_name, spec.api_key)
        if not check.ok:
            _outcome, state = await lifecycle.stop(runner, record, grace)
            await asyncio.sleep(0.5)
            relay()
            from workers.tasks.deploy import FIRST_REQUEST_HINT  # deploy imports this module

            hint = _report_failure(emitter, record.log_path, start_offset, state, FIRST_REQUEST_HINT)
            if check.exited:
                raise _fail(_("the engine answered /health, then exited at its first request"), hint)
            raise _fail(_("the engine answered /health but failed its first request"), hint)
    relay()
    emitter.progress(100, STAGE_TITLES["ready"], stage_key="ready", kv_cache_tokens=progress.kv_cache_tokens)
    return {
        "runtime": {**record.to_dict(), "adopted": False, "log_offset": start_offset},
        "startup_s": round(time.monotonic() - started, 2),
        "kv_cache_tokens": progress.kv_cache_tokens,
    }


async def _recorded(runner, config, name: str, known: dict) -> lifecycle.ContainerRecord | None:
    """The deployment's container: its record, what the panel knows, or (lost both) found by label."""
    record = lifecycle.load_record(config.host_root, name)
    if record is None and known.get("container_id") and known.get("engine"):
        record = lifecycle.ContainerRecord.from_dict({**_blank(name), **known, "name": name})
    if record is not None:
        return record
    from workers.tasks.deploy import LaunchFailed  # deploy imports this module

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
    result = {"outcome": outcome, "container_id": record.container_id}
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
    if alive and (await lifecycle.keep_following(runner, record) or record.pid != state.pid):
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
