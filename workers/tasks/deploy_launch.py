"""One launch skeleton for an engine, whether it runs as a process (workers.tasks.deploy) or in a container
(workers.tasks.deploy_container), the way AWX's BaseTask runs every job through one loop with hooks.

`EngineLaunch.run` is the order every launch keeps: prepare (read the spec, check the host, adopt an
engine that still serves or clear what is in the way), refuse a taken port, start, wait until ready
(/health, /v1/models, then one real request, watching the process all along), and on any failure report the
toolkit's findings for this start's log lines and clean up. A runtime says only how it does each hook.
"""

from __future__ import annotations

import asyncio
import os
import time

from workers.ascend.diagnose import diagnose_lines
from workers.engine.launch.command import LaunchSpec
from workers.engine.launch.ports import port_in_use
from workers.engine.running import runtime
from workers.engine.running.logstages import STAGE_TITLES, StartupProgress, relay_startup_lines
from workers.hosts.local import LocalRunner
from workers.i18n import gettext_noop as _
from workers.identity import CENTRAL, key_for
from workers.models.node_paths import host_path
from workers.sealing import open_for_node

DEFAULT_START_TIMEOUT_S = 1200.0
DEFAULT_HEALTH_INTERVAL_S = 0.5
FOLLOWER_SETTLE_S = 3.0  # a headless follower has no /health: alive this long after start counts
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
    that): permanent for this port; the panel moves a port it picked itself and launches again. A
    disaggregated engine's KV port (a NIXL side channel: the port after its own) counts as its port: the
    panel moves both."""
    if port_in_use(spec.host, spec.port):
        raise LaunchFailed(
            _("port {port} is already in use on this node").format(port=spec.port),
            _("Stop what listens there or give the deployment another port."),
            permanent=True,
            code="port_in_use",
            port=spec.port,
        )
    kv_port = (spec.kv_transfer_config or {}).get("kv_port")
    if isinstance(kv_port, int) and port_in_use(spec.host, kv_port):
        raise LaunchFailed(
            _(
                "the KV transfer port {kv_port} of the engine on port {port} is already in use on this node"
            ).format(kv_port=kv_port, port=spec.port),
            _("Stop what listens there or give the deployment another port."),
            permanent=True,
            code="port_in_use",
            port=spec.port,
        )


def check_model_folder(host_root: str, model_path: str) -> None:
    """A missing folder fails the start at once, saying so, instead of an engine dying on its config."""
    # A simulated host keeps node paths under its root; on a real host the root is "/" and both are one.
    if not (os.path.isdir(model_path) or host_path(host_root, model_path).is_dir()):
        raise LaunchFailed(
            _("the model folder {path} does not exist on this node").format(path=model_path),
            _("Copy the model there (Models → Copy to node), or deploy a copy that is on this node."),
            permanent=True,
            code="model_folder_missing",
        )


def log_size(path: str) -> int:
    try:
        with open(path, "rb") as log_file:
            return log_file.seek(0, 2)
    except OSError:
        return 0


def engine_api_key(config, payload: dict) -> str:
    """The deployment's engine API key, which the panel sealed for this node ("" from an older panel)."""
    sealed = payload.get("engine_key") or ""
    if not sealed:
        return ""
    key = key_for(config.node_name) or key_for(CENTRAL)
    if key is None:
        raise LaunchFailed(_("this agent holds no credential to open the engine's API key"))
    return open_for_node(key, sealed)


class EngineLaunch:
    """The launch of one deployment's engine on this node. Subclasses fill in the hooks; `run` is the loop.

    Hooks: `prepare` (set `spec`, check the host; return an engine that still serves to adopt it, or None
    once whatever was in the way is gone), `start` (start the engine, return its record: `pid`, `log_path`,
    `base_url`, `to_dict()`), `read_lines` (the log from an offset), `exited` (after the engine's process
    ended during start-up: what is known of its end, for the findings and the message), `clean_up` (stop
    the engine that failed and forget it), and `extra_findings` for what only this runtime knows."""

    # How long the last lines of an engine that ended take to reach its log (a container's follower).
    LAST_LINES_S = 0.0
    spec: LaunchSpec  # set by `prepare` (through `take`)

    def __init__(self, emitter, config, payload: dict):
        self.emitter = emitter
        self.config = config
        self.payload = payload
        self.name = payload["name"]
        self.runner = LocalRunner()
        self.grace = float(payload.get("stop_grace_s", 10.0))
        self.log_path = runtime.log_path_for(config.host_root, self.name)
        self.api_key = ""
        self.follower = False

    # The hooks.
    async def prepare(self):
        raise NotImplementedError

    async def start(self):
        raise NotImplementedError

    def read_lines(self, offset: int, max_bytes: int = runtime.MAX_LOG_BYTES_PER_READ) -> tuple[list, int]:
        return runtime.read_log(self.log_path, offset, max_bytes)

    async def exited(self, record) -> object | None:
        return None

    def exit_summary(self, end) -> str:
        """Why the engine ended, in a few words, when the runtime can tell ("" when it cannot)."""
        return ""

    async def clean_up(self, record) -> object | None:
        raise NotImplementedError

    def extra_findings(self, end) -> list[dict]:
        return []

    # The loop.
    def take(self, spec) -> None:
        self.spec = spec
        self.follower = spec.multi_node is not None and spec.multi_node.role == "follower"

    async def still_serves(self, record) -> bool:
        """The one liveness check of an engine found running (runtime.adoptable), for either runtime."""
        return await runtime.adoptable(
            self.runner,
            record,
            self.spec.served_model_name,
            self.api_key,
            follower=self.follower,
            log=self.emitter.log,
        )

    async def run(self) -> dict:
        adopted = await self.prepare()
        if adopted is not None:
            self.emitter.progress(100, STAGE_TITLES["ready"], stage_key="ready")
            return {"runtime": {**adopted.to_dict(), "adopted": True}}
        if not self.follower:
            refuse_taken_port(self.spec)
        start_offset = log_size(self.log_path)  # earlier runs' lines are not this start's
        record = await self.start()
        # Tell the panel the pid at once, so a stop during start-up finds the process.
        self.emitter.progress(1, STAGE_TITLES["starting"], stage_key="starting", runtime=record.to_dict())
        started = time.monotonic()
        progress = await _Startup(self, record, start_offset).wait_until_ready()
        self.emitter.progress(
            100, STAGE_TITLES["ready"], stage_key="ready", kv_cache_tokens=progress.kv_cache_tokens
        )
        # The panel's probes read the deployment log from this start's first line (one source for its log).
        return {
            "runtime": {**record.to_dict(), "adopted": False, "log_offset": start_offset},
            "startup_s": round(time.monotonic() - started, 2),
            "kv_cache_tokens": progress.kv_cache_tokens,
        }

    def report_failure(self, start_offset: int, end=None, fallback_hint: str = "") -> str:
        """Emit the toolkit's findings for this start's log lines as a result event; the first one's hint."""
        tail = self.read_lines(start_offset, max_bytes=4 * 1024 * 1024)[0][-400:]
        findings = self.extra_findings(end) + diagnose_lines(tail)
        self.emitter.emit("result", findings=findings, log_tail=tail[-40:])
        if findings:
            return findings[0]["hint"]
        return fallback_hint or _("Read the engine log above for the first error.")


class _Startup:
    """One start's wait until ready: the engine's lines relayed as they come, its process watched."""

    def __init__(self, launch: EngineLaunch, record, start_offset: int):
        self.launch = launch
        self.record = record
        self.start_offset = start_offset
        self.offset = start_offset
        self.progress = StartupProgress()

    def relay(self) -> None:
        lines, self.offset = self.launch.read_lines(self.offset)
        relay_startup_lines(self.launch.emitter, self.progress, lines)

    async def wait_until_ready(self) -> StartupProgress:
        launch, record = self.launch, self.record
        started = time.monotonic()
        timeout = float(launch.payload.get("start_timeout_s") or DEFAULT_START_TIMEOUT_S)
        interval = float(launch.payload.get("health_interval_s") or DEFAULT_HEALTH_INTERVAL_S)
        while True:
            self.relay()
            if not await launch.runner.is_alive(record.pid):
                await self.ended_during_start_up()
            if launch.follower:
                if time.monotonic() - started >= FOLLOWER_SETTLE_S:
                    break
            elif await runtime.is_healthy(record) and await runtime.serves_model(
                record, launch.spec.served_model_name, launch.api_key
            ):
                break
            if time.monotonic() - started > timeout:
                hint = launch.report_failure(self.start_offset)
                await launch.clean_up(record)
                message = _("the engine did not answer /health within {seconds:.0f} s")
                raise LaunchFailed(message.format(seconds=timeout), hint)
            await asyncio.sleep(interval)
        if not launch.follower:
            await self.first_request()
        self.relay()
        return self.progress

    async def ended_during_start_up(self) -> None:
        await asyncio.sleep(self.launch.LAST_LINES_S)
        self.relay()
        end = await self.launch.exited(self.record)
        hint = self.launch.report_failure(self.start_offset, end)
        why = self.launch.exit_summary(end)
        if why:
            raise LaunchFailed(_("the engine exited during start-up: {why}").format(why=why), hint)
        raise LaunchFailed(_("the engine exited during start-up"), hint)

    async def first_request(self) -> None:
        """/health alone does not show the model runs: one real request must be answered."""
        launch = self.launch
        check = await runtime.first_request(
            launch.runner, self.record, launch.spec.served_model_name, launch.api_key, log=launch.emitter.log
        )
        if check.ok:
            return
        # Stopped before its log is read, so the lines it wrote while dying are in the tail.
        end = await launch.clean_up(self.record)
        await asyncio.sleep(launch.LAST_LINES_S)
        self.relay()
        hint = launch.report_failure(self.start_offset, end, FIRST_REQUEST_HINT)
        if check.exited:
            raise LaunchFailed(_("the engine answered /health, then exited at its first request"), hint)
        raise LaunchFailed(_("the engine answered /health but failed its first request"), hint)
