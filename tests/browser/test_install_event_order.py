"""The provisioning page draws an install's step states in the agent's order: a batch stored late (after a
newer one) never turns a step that was found done back to "failed"."""

import json

from playwright.sync_api import expect

# An install whose reboot step asked for a reboot ("failed"), ran again and found it done ("skipped"), and
# whose first batch reached the panel last: its events have the larger `seq` numbers.
STORE_OUT_OF_ORDER = """
import json
from datetime import UTC, datetime
from panel.nodes.models import Node
from panel.operations.models import Operation
from panel.operations.services import ingest_events
from panel.provisioning.services import stack_of

node, _ = Node.objects.get_or_create(name="order-n1")
operation = Operation.objects.create(kind="install", node=node, target=node.name)
stack = stack_of(node)
stack.status, stack.install_operation = "installing", operation
stack.save()

def batch(*events, final_seq=None):
    return {
        "operation_id": str(operation.pk), "node": node.name, "final_seq": final_seq,
        "events": [
            {"seq": seq, "time": datetime(2026, 1, 1, 0, 0, seq, tzinfo=UTC).isoformat(), "kind": kind,
             "payload": payload}
            for seq, kind, payload in events
        ],
    }

def step(name, state):
    line = f"== {name}: {state}"
    return {"line": line, "stream": "stdout", "step": name, "title": name, "step_state": state}

plan = {"line": "Plan", "steps": [{"name": "reboot", "title": "Reboot"}, {"name": "venv", "title": "venv"}]}
first = batch((1, "state", {"state": "running"}), (2, "log", plan),
              (3, "progress", {"percent": 10, "stage": "Reboot"}), (4, "log", step("reboot", "checking")),
              (5, "log", step("reboot", "running")), (6, "log", step("reboot", "failed")))
second = batch((7, "log", step("reboot", "checking")), (8, "log", step("reboot", "skipped")),
               (9, "progress", {"percent": 60, "stage": "venv"}), (10, "log", step("venv", "running")))
ingest_events(second, sender=node)
ingest_events(first, sender=node)
"""


def test_a_late_batch_does_not_turn_a_skipped_step_into_failed(live_panel, panel_page):
    live_panel.manage("shell", "-c", STORE_OUT_OF_ORDER)
    page = panel_page("bob")
    page.goto("/provisioning/nodes/order-n1/")
    steps = page.get_by_test_id("steps")
    expect(steps.locator("tr[data-step=venv][data-state=running]")).to_be_visible()
    reboot = steps.locator("tr[data-step=reboot]")
    expect(reboot).to_have_attribute("data-state", "skipped")
    expect(reboot).to_contain_text("already done")
    expect(page.get_by_test_id("install-progress")).to_have_text("60")
    assert (
        json.loads(page.evaluate("JSON.stringify(document.querySelector('[data-testid=install]').dataset)"))[
            "lastSeq"
        ]
        == "10"
    )
