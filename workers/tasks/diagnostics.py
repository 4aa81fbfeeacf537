"""agent.collect_diagnostics: gather this node's part of a deployment's diagnostics bundle
(workers.steps.diagnostics) and upload it to the panel with the operation's upload token.

The archive goes over HTTP, not through the event stream: it can be tens of MB, and events are stored and
broadcast to browsers. The operation's result is the manifest (what was collected, this host's clock,
the findings), which the panel uses to line the nodes' logs up in time.
"""

import asyncio

import httpx

from workers.i18n import gettext_noop as _
from workers.steps.diagnostics import collect
from workers.task_names import AGENT_COLLECT_DIAGNOSTICS
from workers.tasks.base import agent_task
from workers.tasks.operation import run_operation

UPLOAD_TIMEOUT_S = 300


class UploadFailed(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.hint = _(
            "The agent could not send the bundle to the panel. Check that PANEL_URL names an address this "
            "node reaches, then collect again."
        )


def diagnostics_body(request: dict):
    def body(emitter, config) -> dict:
        emitter.progress(5, _("Collecting logs and state"))
        data, manifest = asyncio.run(
            collect(config.runner(), request, config.host_root, config.ascend_root, config.node_name)
        )
        for name, size in manifest["files"].items():
            emitter.log(f"{name}: {size} bytes")
        for name, why in manifest["skipped"].items():
            emitter.log(f"{name}: not collected ({why})")
        emitter.progress(70, _("Sending the bundle to the panel"))
        try:
            response = httpx.post(
                request["upload_url"],
                content=data,
                headers={
                    "Authorization": f"Bearer {request['upload_token']}",
                    "Content-Type": "application/gzip",
                },
                timeout=UPLOAD_TIMEOUT_S,
            )
        except httpx.HTTPError as error:
            raise UploadFailed(f"upload to {request['upload_url']} failed: {error}") from error
        if response.status_code >= 300:
            raise UploadFailed(
                f"the panel refused the bundle: HTTP {response.status_code} {response.text[:200]}"
            )
        emitter.progress(100, _("Bundle sent"))
        return {"manifest": manifest, "uploaded_bytes": len(data)}

    return body


@agent_task(AGENT_COLLECT_DIAGNOSTICS)
def collect_diagnostics(operation_id: str, start_seq: int = 0, request: dict | None = None, target=None):
    run_operation(operation_id, start_seq, diagnostics_body(request or {}), target=target)
