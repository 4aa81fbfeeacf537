"""agent.fabric_check: read this node's part of the HCCL fabric (workers.steps.fabric) as an operation.

The result is the raw report; the panel judges all nodes' reports together (workers.steps.fabric_verdict),
since TLS consistency and reachability are properties of the pair, not of one host. The operation log
still shows this node's own verdict, line by line, for whoever reads it there.
"""

import asyncio

from workers.i18n import gettext_noop as _
from workers.steps.fabric import probe_fabric
from workers.steps.fabric_verdict import judge
from workers.task_names import AGENT_FABRIC_CHECK
from workers.tasks.base import agent_task
from workers.tasks.operation import run_operation


def _pings(npu: dict) -> str:
    return ", ".join(f"{p['node']} {p['target']} {p['loss_pct']}% lost" for p in npu["pings"])


def fabric_body(request: dict):
    def body(emitter, config) -> dict:
        emitter.progress(5, _("Reading the NPU network"))
        report = asyncio.run(probe_fabric(config.runner(), request, config.ascend_root))
        if report.get("pings_only"):  # a second round: the first one's reads stand, judged by the panel
            for npu in report["npus"]:
                emitter.log(f"NPU {npu['device']}: ping {_pings(npu) or '-'}")
            emitter.progress(100, _("NPU network read"))
            return {"report": report}
        for npu in report["npus"]:
            pings = _pings(npu)
            emitter.log(
                f"NPU {npu['device']}: ip {npu['ip'] or '-'} link {npu['link'] or '-'} "
                f"health {npu['health'] or '-'} tls {npu['tls_enabled']}"
                + (f"; ping {pings}" if pings else "")
            )
        for entry in judge({config.node_name: report})["checklist"]:
            emitter.log(f"[{entry['status'].upper()}] {entry['check']}: {entry['detail']}")
        emitter.progress(100, _("NPU network read"))
        return {"report": report}

    return body


@agent_task(AGENT_FABRIC_CHECK)
def fabric_check(
    operation_id: str, start_seq: int = 0, request: dict | None = None, target: dict | None = None
):
    run_operation(operation_id, start_seq, fabric_body(request or {}), target=target)
