"""Preflight and install as operations (agent.preflight, agent.install).

Both take `request`, a dict the panel builds (panel.provisioning.services):
    profile           a vllm-ascend release of the matrix ("0.11.0") or "cpu"
    driver_version, firmware_version   of the driver / firmware .run files in the package store (or None)
    pip               {"wheelhouse": true} or {"index_url": ..., "extra_index_urls": [...]}
    packages          the store's candidate files [{"name", "kind", "version", "sha256", "size", "url"}]
    download_token    authenticates this operation's downloads from the panel
    allow_reboot      may the reboot step reboot the host
    plan, resume_from (install only) the plan to reuse and the step to start from

Preflight changes nothing on the host. Install runs idempotent steps (check -> do -> verify), reports each
step as a "step" event, progress as steps done, reads the cancel flag between steps, and on a failure
gives the step's diagnosis as the hint.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import PurePosixPath

from workers import host_locks
from workers.ascend.compat import cpu_profile, profile_for
from workers.ascend.diagnose import diagnose
from workers.cancellation import cancel_requested
from workers.i18n import gettext_noop as _
from workers.i18n import join_lines
from workers.steps.base import RebootRequired, StepContext, StepFailed, StepSpec, run_step
from workers.steps.fabric import probe_fabric
from workers.steps.fabric_verdict import judge
from workers.steps.install import build_step
from workers.steps.plan import STACK_RECORD, InstallOptions, PlanError, plan_cpu_install, plan_install
from workers.steps.preflight import FAIL, item, run_preflight, worst
from workers.task_names import AGENT_INSTALL, AGENT_PREFLIGHT
from workers.tasks.base import agent_task
from workers.tasks.install_host import HostPaths, collect_host_state, installed_versions
from workers.tasks.install_preflight_cpu import cpu_checklist
from workers.tasks.install_sources import FetchPackagesStep, needed_files, pip_source, probe_index
from workers.tasks.operation import OperationCancelled, run_operation

CPU = "cpu"
TAIL_LINES = 40  # log lines of a failed step that diagnose reads


class InstallFailed(Exception):
    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


def choose_profile(name: str):
    if name == CPU:
        return cpu_profile()
    profile = profile_for(name)
    if profile is None:
        raise InstallFailed(
            _("No profile {name} in the compatibility matrix").format(name=name),
            _("Pick one of the rows on the Stack profiles page."),
        )
    return profile


def options_for(request: dict, paths: HostPaths) -> InstallOptions:
    return InstallOptions(
        packages_dir=paths.packages_dir,
        ascend_root=paths.ascend_root,
        venv_root=paths.venv_root,
        work_dir=paths.work_dir,
        driver_version=request.get("driver_version") or None,
        firmware_version=request.get("firmware_version") or None,
        pip=pip_source(request.get("pip") or {}, paths.wheelhouse),
        python=request.get("python") or None,
        allow_reboot=bool(request.get("allow_reboot")),
    )


def make_plan(state: dict, profile, options: InstallOptions) -> list[StepSpec]:
    if getattr(profile, "vllm_ascend", None) is None:
        return plan_cpu_install(state, profile, options)
    return plan_install(state, profile, options)


def venv_of(profile, paths: HostPaths) -> str:
    return str(PurePosixPath(paths.venv_root) / profile.name)


def read_state(config, request: dict, emitter):
    paths = HostPaths.for_host(config.host_root, config.ascend_root)
    profile = choose_profile(str(request.get("profile") or ""))
    options = options_for(request, paths)
    emitter.progress(2, _("Reading host facts and versions"))
    state = asyncio.run(
        collect_host_state(
            config.runner(),
            config.host_root,
            paths,
            venv=venv_of(profile, paths),
            cann=getattr(profile, "cann", None),
        )
    )
    return paths, profile, options, state


# --- preflight ----------------------------------------------------------------------------------------


def note_sources(state: dict, request: dict, paths: HostPaths) -> bool:
    """Put where the install's files come from into the host state; True when pip uses the wheelhouse."""
    offered = request.get("packages") or []
    on_host = set(os.listdir(paths.packages_dir)) if os.path.isdir(paths.packages_dir) else set()
    state["packages_present"] = sorted(on_host | {f["name"] for f in offered})
    wheelhouse = bool((request.get("pip") or {}).get("wheelhouse"))
    state["offline_bundle"] = wheelhouse and any(f["kind"] == "wheel" for f in offered)
    return wheelhouse


def host_checklist(state: dict, profile, steps: list[StepSpec], options: InstallOptions) -> list[dict]:
    if profile.name == CPU:
        return cpu_checklist(state, profile, steps, options)
    return run_preflight(state, profile, steps, options)


def hold_on_failed_checks(state: dict, profile, plan: list[StepSpec], options, request: dict, paths) -> None:
    """Before the first step, the preflight's checks once more with this install's own facts: a failed one
    stops the install before it changes anything, unless an admin overrode it with a reason (the panel
    sends those as preflight_overrides). The panel holds an install over its stored preflight; this holds
    one started without a preflight, or on a node that changed since."""
    note_sources(state, request, paths)
    overrides = request.get("preflight_overrides") or {}
    failed = [
        entry
        for entry in host_checklist(state, profile, plan, options)
        if entry["status"] == FAIL and entry["check"] not in overrides
    ]
    if failed:
        raise InstallFailed(
            _("Failed preflight checks ({count}): {checks}; nothing was changed").format(
                count=len(failed), checks=", ".join(entry["check"] for entry in failed)
            ),
            "\n".join(f"{entry['check']}: {entry['detail']}. {entry['fix']}" for entry in failed),
        )


def fabric_items(config) -> list[dict]:
    """This host's NPU NICs (address, link, health, TLS alike on all) as checklist lines; multi-node pings
    run before a multi-node launch, when the other nodes are known."""
    report = asyncio.run(probe_fabric(config.runner(), {}, config.ascend_root))
    if report["hccn_tool"] is not None and not report["npus"]:
        return []  # NPUs without RoCE NICs (Atlas 300I cards): nothing to check
    return judge({config.node_name: report})["checklist"]


def preflight_body(request: dict):
    def body(emitter, config) -> dict:
        paths, profile, options, state = read_state(config, request, emitter)
        emitter.progress(50, _("Planning the install"))
        checklist, steps = [], []
        try:
            steps = make_plan(state, profile, options)
        except PlanError as error:
            checklist.append(
                item(
                    "plan",
                    FAIL,
                    str(error),
                    _("Upload what it names to the package store, then run the checks again."),
                )
            )
        wheelhouse = note_sources(state, request, paths)
        if not wheelhouse and any(s.kind == "pip_install" for s in steps):
            emitter.progress(70, _("Probing the package index"))
            state["mirror_reachable"] = probe_index(options.pip.index_url)
        checklist += host_checklist(state, profile, steps, options)
        if profile.name != CPU and state.get("driver_loaded"):
            emitter.progress(85, _("Reading the NPU network"))
            checklist += fabric_items(config)
        for entry in checklist:
            emitter.log(f"[{entry['status'].upper()}] {entry['check']}: {entry['detail']}")
        emitter.progress(100, _("Checks complete"))
        return {
            "profile": str(request.get("profile")),
            "checklist": checklist,
            "worst": worst(checklist),
            "plan": [spec.to_dict() for spec in steps],
            "host": {key: state.get(key) for key in ("arch", "chip", "npu_count", "driver", "cann")},
        }

    return body


@agent_task(AGENT_PREFLIGHT)
def preflight(operation_id: str, start_seq: int = 0, request: dict | None = None) -> None:
    run_operation(operation_id, start_seq, preflight_body(request or {}))


# --- install ------------------------------------------------------------------------------------------


class StepRunner:
    """Runs the steps one by one: events per step, progress as steps done, cancel between steps."""

    def __init__(self, operation_id: str, emitter, ctx_args: dict):
        self.operation_id, self.emitter = operation_id, emitter
        self.lines: dict[str, list[str]] = {}
        self.ctx = StepContext(emit=self.emit, **ctx_args)

    def emit(self, kind: str, payload: dict) -> None:
        if kind == "log":
            self.lines.setdefault(payload["step"], []).append(payload["line"])
            self.emitter.log(f"[{payload['step']}] {payload['line']}", stream=payload.get("stream", "stdout"))
        elif kind == "state":
            # A log event, not the operation's "state" kind: a step's state must never end the operation.
            self.log_step(payload["step"], payload["title"], payload["state"], error=payload.get("error"))

    def log_step(self, name: str, title: str, state: str, **extra) -> None:
        self.emitter.emit(
            "log",
            line=f"== {name}: {state}",
            stream="stdout",
            step=name,
            title=title,
            step_state=state,
            **extra,
        )

    def hint_for(self, error: StepFailed) -> tuple[str, list[dict]]:
        tail = self.lines.get(error.step, [])[-TAIL_LINES:]
        findings = diagnose("\n".join([*tail, error.output_tail]))
        hints = [error.hint] if error.hint else []
        # A template the panel knows, so each line's title and hint are shown in the reader's language.
        hints += [_("{title}: {hint}").format(**f) for f in findings if f["hint"] not in hints]
        return join_lines(hints), findings

    async def run(self, steps: list, order: list[int], simulate_reboot: bool) -> dict[str, str]:
        """Run steps[i] for each i in order (a resume skips the steps before the one it starts at)."""
        outcome: dict[str, str] = {}
        total = len(steps)
        position = 0
        while position < len(order):
            index = order[position]
            step = steps[index]
            if cancel_requested(self.operation_id):
                self.emitter.log(_("Cancelled before step {name}").format(name=step.name))
                self.log_step(step.name, step.title, "cancelled")
                raise OperationCancelled(
                    _("Cancelled before step {name} ({title})").format(name=step.name, title=step.title)
                )
            percent = 100 * index / total
            self.emitter.progress(percent, step.title, step=step.name, index=index, total=total)
            try:
                outcome[step.name] = await run_step(step, self.ctx)
            except RebootRequired:
                self.emitter.progress(
                    percent, _("Waiting for the node to come back after its reboot"), step=step.name
                )
                if not simulate_reboot:
                    raise
                self.simulate_reboot(step)
                continue  # the same step again: it now finds the reboot done
            except StepFailed as error:
                hint, findings = self.hint_for(error)
                for finding in findings:
                    self.emitter.emit(
                        "log", line=f"{finding['title']}: {finding['hint']}", stream="stderr", finding=finding
                    )
                raise InstallFailed(str(error), hint) from error
            position += 1
        return outcome

    def simulate_reboot(self, step) -> None:
        """A sim host cannot reboot: mark the boot that asked as an earlier one, as a real reboot would."""
        with open(step.marker, "w", encoding="utf-8") as handle:
            handle.write(f"sim-boot-before-reboot-{uuid.uuid4()}\n")
        self.emitter.log(_("Sim host: simulated the reboot (the node has a new boot id)"))


def install_body(operation_id: str, request: dict):
    def body(emitter, config) -> dict:
        paths, profile, options, state = read_state(config, request, emitter)
        if request.get("plan") is not None:
            plan = [StepSpec.from_dict(spec) for spec in request["plan"]]
        else:
            try:
                plan = make_plan(state, profile, options)
            except PlanError as error:
                raise InstallFailed(
                    str(error), _("Run the preflight checks; they list what is missing.")
                ) from error
            hold_on_failed_checks(state, profile, plan, options, request, paths)
        files = needed_files(plan, request.get("packages") or [], bool(options.pip.wheelhouse))
        fetch = FetchPackagesStep(
            files, paths.packages_dir, paths.wheelhouse, request.get("download_token", "")
        )
        steps = [fetch, *(build_step(spec) for spec in plan)]
        emitter.emit(
            "log",
            line="Plan: " + " → ".join(s.name for s in steps),
            stream="stdout",
            profile=profile.name,
            steps=[{"name": s.name, "title": s.title} for s in steps],
            specs=[spec.to_dict() for spec in plan],
        )
        names = [s.name for s in steps]
        resume_from = request.get("resume_from")
        if resume_from and resume_from not in names:
            raise InstallFailed(
                _("The plan has no step {name}").format(name=resume_from),
                _("Start a new install instead of resuming."),
            )
        start = names.index(resume_from) if resume_from else 0
        # Fetching always runs first: a resume after replacing a broken upload must get the new file.
        order = [0, *range(max(start, 1), len(steps))]
        venv = venv_of(profile, paths)
        host = config.runner()
        runner = StepRunner(
            operation_id,
            emitter,
            {
                "runner": host,
                "ascend_root": paths.ascend_root,
                "packages_dir": paths.packages_dir,
                "work_dir": paths.work_dir,
                "venv": venv,
                "pip": options.pip,
            },
        )
        simulated = bool(os.environ.get("ASCEND_PANEL_SIM_ROOT"))

        async def run_and_read() -> dict:
            outcome = await runner.run(steps, order, simulate_reboot=simulated)
            emitter.progress(99, _("Reading the installed versions"))
            record = next((s.params["record"] for s in plan if s.kind == "record_stack"), None)
            if record is None:  # nothing to do: the host already had this stack
                text = await host.read_text(str(PurePosixPath(venv) / STACK_RECORD))
                record = json.loads(text) if text else {}
            versions = await installed_versions(host, paths.ascend_root, venv)
            return {"profile": profile.name, "stack": record, "versions": versions, "outcome": outcome}

        return asyncio.run(run_and_read())

    return body


@agent_task(AGENT_INSTALL)
def install(operation_id: str, start_seq: int = 0, request: dict | None = None) -> None:
    body = install_body(operation_id, request or {})
    run_operation(operation_id, start_seq, host_locks.exclusive(host_locks.INSTALL, operation_id, body))
