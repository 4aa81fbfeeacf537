"""Agent tasks for deployments: launch an engine, stop it, probe every engine on the node, benchmark one.

Launch and stop are operations (numbered events, a terminal state); the probe is a plain message the
panel's reconcile loop asks for every few seconds and whose answer goes back with send_to_panel.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time

from workers.agent_config import AgentConfig
from workers.ascend.diagnose import diagnose_lines
from workers.contracts import utcnow
from workers.engine import readiness, runtime
from workers.engine.benchmark import run_benchmark
from workers.engine.command import build_launch
from workers.engine.launch_spec import launch_spec_from_payload
from workers.engine.logstages import STAGE_TITLES, StartupProgress, relay_startup_lines
from workers.engine.metrics import EngineMetrics, MetricsFormatError, parse_metrics, rates
from workers.engine.ports import port_in_use
from workers.engine.stack import find_stack
from workers.events import send_to_panel
from workers.hosts.local import LocalRunner
from workers.hosts.sync_loop import run_coroutine_sync
from workers.i18n import gettext_noop as _
from workers.identity import CENTRAL, key_for
from workers.models.node_paths import host_path
from workers.sealing import open_for_node
from workers.task_names import (
    AGENT_BENCHMARK_DEPLOYMENT,
    AGENT_LAUNCH_DEPLOYMENT,
    AGENT_PROBE_DEPLOYMENTS,
    AGENT_STOP_DEPLOYMENT,
    INGEST_DEPLOYMENT_PROBE,
)
from workers.tasks import deploy_container
from workers.tasks.base import agent_task
from workers.tasks.operation import run_operation

log = logging.getLogger(__name__)

DEFAULT_START_TIMEOUT_S = 1200.0
DEFAULT_HEALTH_INTERVAL_S = 0.5
FOLLOWER_SETTLE_S = 3.0  # a headless follower has no /health: alive this long after start counts
MAX_LOG_LINES_PER_PROBE = 500
FIRST_REQUEST_HINT = _(
    "The engine loaded the model but could not run it. The first error in the engine log above names what "
    "failed: often a kernel this engine build lacks for the model's shapes (attention head size, data type) "
    "or an operator this NPU does not support."
)


class LaunchFailed(Exception):
    """A foreseen launch failure. `permanent`: launching the same again fails the same way (a missing
    folder, a port another process holds), so the panel must not retry it; `details` say what for the
    panel to act on (the operation's result: {"permanent": true, "code": ..., **details})."""

    def __init__(self, message: str, hint: str = "", *, permanent: bool = False, code: str = "", **details):
        super().__init__(message)
        self.hint = hint
        self.permanent = permanent
        self.code = code
        self.details = details


def refuse_taken_port(spec) -> None:
    """Fail before starting when another process listens where the engine would (the panel cannot see
    that): permanent for this port; the panel moves a port it picked itself and launches again."""
    if port_in_use(spec.host, spec.port):
        raise LaunchFailed(
            _("port {port} is already in use on this node").format(port=spec.port),
            _("Stop what listens there or give the deployment another port."),
            permanent=True,
            code="port_in_use",
            port=spec.port,
        )


def _failure_findings(emitter, log_path: str, start_offset: int, fallback_hint: str = "") -> str:
    """Emit the toolkit's findings for this start's log lines as a result event; the first finding's hint."""
    tail = runtime.read_log(log_path, start_offset, max_bytes=4 * 1024 * 1024)[0][-400:]
    findings = diagnose_lines(tail)
    emitter.emit("result", findings=findings, log_tail=tail[-40:])
    if findings:
        return findings[0]["hint"]
    return fallback_hint or _("Read the engine log above for the first error.")


def engine_api_key(config, payload: dict) -> str:
    """The deployment's engine API key, which the panel sealed for this node ("" from an older panel)."""
    sealed = payload.get("engine_key") or ""
    if not sealed:
        return ""
    key = key_for(config.node_name) or key_for(CENTRAL)
    if key is None:
        raise LaunchFailed(_("this agent holds no credential to open the engine's API key"))
    return open_for_node(key, sealed)


async def _answers_first_request(
    emitter, runner, record, served_name: str, api_key: str
) -> readiness.FirstRequest:
    emitter.log(f"first request: one token of {served_name} (/health alone does not show the model runs)")
    check = await readiness.check_first_request(
        runner, record.pid, record.base_url, served_name, api_key=api_key
    )
    emitter.log("first request: answered" if check.ok else f"first request failed: {check.detail}")
    return check


async def _still_serves(emitter, runner, record, served_name: str, api_key: str) -> bool:
    """An engine found running is adopted only while it answers /health and a real request (with the key
    the panel holds now: an engine started with another key is started again)."""
    return (
        await runtime.is_healthy(record)
        and (await _answers_first_request(emitter, runner, record, served_name, api_key)).ok
    )


async def _launch(emitter, config, payload: dict) -> dict:
    if payload.get("runtime_kind") == "container":
        return await deploy_container.launch_container(emitter, config, payload)
    await deploy_container.clear_container(emitter, config, payload)
    name = payload["name"]
    runner = LocalRunner()
    stack = find_stack(config.host_root)
    log_path = runtime.log_path_for(config.host_root, name)
    api_key = engine_api_key(config, payload)
    spec = launch_spec_from_payload(
        payload["spec"],
        log_path=log_path,
        venv_path=stack.venv,
        set_env_scripts=stack.set_env_scripts,
        api_key=api_key,
    )
    launch = build_launch(spec)
    follower = spec.multi_node is not None and spec.multi_node.role == "follower"
    _check_model_folder(config.host_root, spec.model_path)

    existing = runtime.load_record(config.host_root, name)
    existing_state = await runtime.engine_state(runner, existing) if existing is not None else "gone"
    if existing is not None and existing_state == "gone":
        await runtime.end_orphaned_group(runner, existing.pid)  # its workers may outlive a kill -9
    elif existing is not None and existing_state == "alive":
        if existing.argv == launch.argv and (
            follower or await _still_serves(emitter, runner, existing, spec.served_model_name, api_key)
        ):
            emitter.log(f"engine {name} already runs as pid {existing.pid}; adopting it")
            emitter.progress(100, STAGE_TITLES["ready"], stage_key="ready")
            return {"runtime": {**existing.to_dict(), "adopted": True}}
        emitter.log(
            f"stopping the earlier engine pid {existing.pid} (its command differs or it is unhealthy)"
        )
        await runtime.stop_engine(runner, existing, payload.get("stop_grace_s", 10.0))

    if not follower:
        refuse_taken_port(spec)
    emitter.log("$ " + " ".join(launch.argv))
    start_offset = offset = _log_size(log_path)  # earlier runs' lines are not this start's
    record = await runtime.start_engine(
        runner, config.host_root, name, launch.argv, launch.env, launch.log_path, spec.port, spec.host
    )
    # Tell the panel the pid at once, so a stop during start-up finds the process.
    emitter.progress(1, STAGE_TITLES["starting"], stage_key="starting", runtime=record.to_dict())
    progress = StartupProgress()
    started = time.monotonic()
    timeout = float(payload.get("start_timeout_s") or DEFAULT_START_TIMEOUT_S)
    interval = float(payload.get("health_interval_s") or DEFAULT_HEALTH_INTERVAL_S)
    while True:
        lines, offset = runtime.read_log(log_path, offset)
        relay_startup_lines(emitter, progress, lines)
        if not await runner.is_alive(record.pid):
            lines, offset = runtime.read_log(log_path, offset)
            for line in lines:
                emitter.log(line)
            hint = _failure_findings(emitter, log_path, start_offset)
            runtime.forget_record(config.host_root, name)
            raise LaunchFailed(_("the engine exited during start-up"), hint)
        if follower:
            if time.monotonic() - started >= FOLLOWER_SETTLE_S:
                break
        elif await runtime.is_healthy(record) and await runtime.serves_model(
            record, spec.served_model_name, api_key
        ):
            break
        if time.monotonic() - started > timeout:
            hint = _failure_findings(emitter, log_path, start_offset)
            await runtime.stop_engine(runner, record, payload.get("stop_grace_s", 10.0))
            runtime.forget_record(config.host_root, name)
            raise LaunchFailed(
                _("the engine did not answer /health within {seconds:.0f} s").format(seconds=timeout), hint
            )
        await asyncio.sleep(interval)
    if not follower:
        check = await _answers_first_request(emitter, runner, record, spec.served_model_name, api_key)
        if not check.ok:
            # Stopped before its log is read, so the lines it wrote while dying are in the tail.
            await runtime.stop_engine(runner, record, payload.get("stop_grace_s", 10.0))
            lines, offset = runtime.read_log(log_path, offset)
            for line in lines:
                emitter.log(line)
            hint = _failure_findings(emitter, log_path, start_offset, FIRST_REQUEST_HINT)
            runtime.forget_record(config.host_root, name)
            if check.exited:
                raise LaunchFailed(_("the engine answered /health, then exited at its first request"), hint)
            raise LaunchFailed(_("the engine answered /health but failed its first request"), hint)
    lines, offset = runtime.read_log(log_path, offset)
    for line in lines:
        emitter.log(line)
    emitter.progress(100, STAGE_TITLES["ready"], stage_key="ready", kv_cache_tokens=progress.kv_cache_tokens)
    # The panel's probes read the deployment log from this start's first line (one source for its log).
    return {
        "runtime": {**record.to_dict(), "adopted": False, "log_offset": start_offset},
        "startup_s": round(time.monotonic() - started, 2),
        "kv_cache_tokens": progress.kv_cache_tokens,
    }


def _check_model_folder(host_root: str, model_path: str) -> None:
    """A missing folder fails the start at once, saying so, instead of an engine dying on its config."""
    # A simulated host keeps node paths under its root; on a real host the root is "/" and both are one.
    if not (os.path.isdir(model_path) or host_path(host_root, model_path).is_dir()):
        raise LaunchFailed(
            _("the model folder {path} does not exist on this node").format(path=model_path),
            _("Copy the model there (Models → Copy to node), or deploy a copy that is on this node."),
            permanent=True,
            code="model_folder_missing",
        )


def _log_size(path: str) -> int:
    try:
        with open(path, "rb") as log_file:
            return log_file.seek(0, 2)
    except OSError:
        return 0


@agent_task(AGENT_LAUNCH_DEPLOYMENT)
def launch_deployment(operation_id: str, payload: dict, start_seq: int = 0) -> None:
    run_operation(
        operation_id, start_seq, lambda emitter, config: run_coroutine_sync(_launch(emitter, config, payload))
    )


def engine_to_stop(
    recorded: runtime.EngineRecord | None, name: str, named: dict
) -> runtime.EngineRecord | None:
    """The engine a stop may signal: the one this agent recorded for the deployment, and only if the stop
    names that very process (pid and start time) or names none; from the panel's word alone only a process
    named by pid and start time, never a bare pid."""
    if not named.get("pid"):
        return recorded
    wanted = runtime.EngineRecord.from_dict({"name": name, "port": 0, "log_path": "", **named})
    if recorded is None and not wanted.pid_start:
        raise runtime.StopRefused(
            _("the stop names pid {pid} without its start time, and no engine of {name} is recorded here: "
              "nothing was stopped").format(pid=wanted.pid, name=name),
            _("Stop the process by hand if it still runs; engines started by this agent are named fully."),
        )  # fmt: skip
    if recorded is not None and not recorded.same_engine(wanted):
        raise runtime.StopRefused(
            _("the stop names engine pid {pid} (start {start}), but the engine recorded for {name} here is "
              "pid {recorded_pid} (start {recorded_start}): nothing was stopped").format(
                pid=wanted.pid, start=wanted.pid_start, name=name,
                recorded_pid=recorded.pid, recorded_start=recorded.pid_start,
            ),
            _("The panel's record of this engine is out of date: refresh the deployment and stop it again."),
        )  # fmt: skip
    return recorded or wanted


async def _stop(emitter, config, payload: dict) -> dict:
    if payload.get("runtime_kind") == "container":
        return await deploy_container.stop_container(emitter, config, payload)
    name = payload["name"]
    runner = LocalRunner()
    recorded = runtime.load_record(config.host_root, name)
    record = engine_to_stop(recorded, name, payload.get("runtime") or {})
    if record is None:
        emitter.log(f"no engine recorded for {name} on this node; nothing to stop")
        return {"outcome": "not running"}
    grace = float(payload.get("grace_s", 10.0))
    emitter.progress(10, _("Stopping the engine (SIGTERM, SIGKILL after {grace:.0f} s)").format(grace=grace))
    outcome = await runtime.stop_engine(runner, record, grace)
    runtime.forget_record(config.host_root, name)
    emitter.log(f"engine {name} pid {record.pid}: {outcome}")
    return {"outcome": outcome, "pid": record.pid}


@agent_task(AGENT_STOP_DEPLOYMENT)
def stop_deployment(operation_id: str, payload: dict, start_seq: int = 0) -> None:
    run_operation(
        operation_id, start_seq, lambda emitter, config: run_coroutine_sync(_stop(emitter, config, payload))
    )


# The previous scrape of each engine, for rates; the agent process outlives the tasks.
_last_scrapes: dict[str, tuple[float, EngineMetrics]] = {}
_scrapes_lock = threading.Lock()


def _metrics_message(name: str, text: str) -> dict | None:
    try:
        current = parse_metrics(text)
    except MetricsFormatError:
        return None
    now = time.monotonic()
    with _scrapes_lock:
        earlier = _last_scrapes.get(name)
        _last_scrapes[name] = (now, current)
    message = current.as_dict()
    if earlier is not None and now - earlier[0] > 0:
        window = rates(earlier[1], current, now - earlier[0])
        message.update(
            window_s=round(window.seconds, 2),
            prompt_tokens_per_s=window.prompt_tokens_per_second,
            generation_tokens_per_s=window.generation_tokens_per_second,
            window_ttft_p50=window.ttft_p50,
            window_ttft_p95=window.ttft_p95,
            window_tpot_p50=window.tpot_p50,
            window_tpot_p95=window.tpot_p95,
        )
    return message


async def _probe_one(runner: LocalRunner, config, item: dict) -> dict:
    if item.get("runtime_kind") == "container":
        return await deploy_container.probe_container(runner, config, item, _metrics_message)
    name = item["name"]
    record = runtime.load_record(config.host_root, name)
    if record is None and (item.get("runtime") or {}).get("pid"):
        record = runtime.EngineRecord.from_dict({"name": name, **item["runtime"]})
    if record is None:
        return {"name": name, "recorded": False, "alive": False, "healthy": False, "lines": []}
    alive = await runtime.is_alive(runner, record)
    follower = bool(item.get("follower"))
    healthy = alive and (follower or await runtime.is_healthy(record))
    read_from = int(item.get("log_offset") or 0)
    lines, offset = runtime.read_log(record.log_path, read_from)
    lines = lines[-MAX_LOG_LINES_PER_PROBE:]
    result = {
        "name": name,
        "recorded": True,
        "alive": alive,
        "healthy": healthy,
        "runtime": record.to_dict(),
        "log_from": read_from,
        "log_offset": offset,
        "lines": lines,
    }
    if healthy and not follower and item.get("scrape", True):
        text = await runtime.http_text(f"{record.base_url}/metrics")
        if text is not None:
            result["metrics"] = _metrics_message(name, text)
    if not alive:
        result["findings"] = diagnose_lines(runtime.tail_lines(record.log_path, 200))
    return result


async def _probe(config, deployments: list[dict]) -> list[dict]:
    runner = LocalRunner()
    return list(await asyncio.gather(*(_probe_one(runner, config, item) for item in deployments)))


@agent_task(AGENT_PROBE_DEPLOYMENTS)
def probe_deployments(request: dict) -> None:
    """Probe the engines the panel lists and send what was seen back (pid alive, /health, log, metrics)."""
    config = AgentConfig.from_env()
    results = run_coroutine_sync(_probe(config, request.get("deployments") or []))
    send_to_panel(
        INGEST_DEPLOYMENT_PROBE,
        {
            "node": config.node_name,
            "time": utcnow().isoformat(),
            "request_id": request.get("request_id"),
            "results": results,
        },
    )


@agent_task(AGENT_BENCHMARK_DEPLOYMENT)
def benchmark_deployment(operation_id: str, payload: dict, start_seq: int = 0) -> None:
    def body(emitter, config):
        return run_coroutine_sync(run_benchmark(emitter, payload, engine_api_key(config, payload)))

    run_operation(operation_id, start_seq, body)
