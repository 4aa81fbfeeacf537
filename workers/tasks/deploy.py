"""Agent tasks for deployments: launch an engine, stop it, probe every engine on the node, benchmark one.

Launch and stop are operations (numbered events, a terminal state); the probe is a plain message the
panel's reconcile loop asks for every few seconds and whose answer goes back with send_to_panel. The launch
runs workers.tasks.deploy_launch's loop: as a process here, in a container in workers.tasks.deploy_container.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from workers.agent_config import AgentConfig
from workers.ascend.diagnose import diagnose_lines
from workers.contracts import utcnow
from workers.engine.launch.command import build_launch
from workers.engine.launch.launch_spec import launch_spec_from_payload
from workers.engine.launch.stack import find_stack
from workers.engine.running import runtime
from workers.engine.running.benchmark import run_benchmark
from workers.engine.running.metrics import EngineMetrics, MetricsFormatError, parse_metrics, rates
from workers.events import send_to_panel
from workers.hosts.local import LocalRunner
from workers.hosts.sync_loop import run_coroutine_sync
from workers.i18n import gettext_noop as _
from workers.task_names import (
    AGENT_BENCHMARK_DEPLOYMENT,
    AGENT_LAUNCH_DEPLOYMENT,
    AGENT_PROBE_DEPLOYMENTS,
    AGENT_STOP_DEPLOYMENT,
    INGEST_DEPLOYMENT_PROBE,
)
from workers.tasks import deploy_container
from workers.tasks.base import agent_task
from workers.tasks.deploy_launch import EngineLaunch, check_model_folder, engine_api_key
from workers.tasks.operation import run_operation

log = logging.getLogger(__name__)

MAX_LOG_LINES_PER_PROBE = 500


class ProcessLaunch(EngineLaunch):
    """The engine as a detached process of this host's vLLM stack (workers.engine.running.runtime)."""

    async def prepare(self) -> runtime.EngineRecord | None:
        # The deployment may have run in a container before (its runtime changed).
        await deploy_container.clear_container(self.emitter, self.config, self.payload)
        host_root = self.config.host_root
        stack = find_stack(host_root)
        self.api_key = engine_api_key(self.config, self.payload)
        self.take(
            launch_spec_from_payload(
                self.payload["spec"],
                log_path=self.log_path,
                venv_path=stack.venv,
                set_env_scripts=stack.set_env_scripts,
                api_key=self.api_key,
            )
        )
        self.launch = build_launch(self.spec)
        check_model_folder(host_root, self.spec.model_path)
        existing = runtime.load_record(host_root, self.name)
        if existing is None:
            return None
        state = await runtime.engine_state(self.runner, existing)
        if state == "gone":
            await runtime.end_orphaned_group(self.runner, existing.pid)  # its workers may outlive a kill -9
        elif state == "alive":
            if existing.argv == self.launch.argv and await self.still_serves(existing):
                self.emitter.log(f"engine {self.name} already runs as pid {existing.pid}; adopting it")
                return existing
            self.emitter.log(
                f"stopping the earlier engine pid {existing.pid} (its command differs or it is unhealthy)"
            )
            await runtime.stop_engine(self.runner, existing, self.grace)
        return None

    async def start(self) -> runtime.EngineRecord:
        launch, spec = self.launch, self.spec
        self.emitter.log("$ " + " ".join(launch.argv))
        return await runtime.start_engine(
            self.runner, self.config.host_root, self.name, launch.argv, launch.env, launch.log_path,
            spec.port, spec.host,
        )  # fmt: skip

    async def exited(self, record) -> None:
        runtime.forget_record(self.config.host_root, self.name)

    async def clean_up(self, record) -> None:
        await runtime.stop_engine(self.runner, record, self.grace)
        runtime.forget_record(self.config.host_root, self.name)


async def _launch(emitter, config, payload: dict) -> dict:
    container = payload.get("runtime_kind") == "container"
    launch = deploy_container.ContainerLaunch if container else ProcessLaunch
    return await launch(emitter, config, payload).run()


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
            window_ttft_p90=window.ttft_p90,
            window_tpot_p50=window.tpot_p50,
            window_tpot_p95=window.tpot_p95,
            window_prefix_cache_hit_rate=window.prefix_cache_hit_rate,
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
