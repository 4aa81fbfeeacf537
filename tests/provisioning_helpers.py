"""What the provisioning flows share in the integration and end-to-end tiers: the profile they install on
the simulated A2, its node as an agent reaches it, and waiting for an operation's last event."""

import time

from tests.integration.conftest import TEST_NODE

PROFILE = "0.11.0"  # CANN 8.3.RC2: the sim A2's driver stays, toolkit / ops / NNAL and the venv go in


def make_node():
    from panel.nodes.models import Node

    return Node.objects.create(name=TEST_NODE, transport="agent")


def wait_finished(operation, timeout=180):
    """`operation` once terminal with every event it sent stored (its steps' last states among them)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        operation.refresh_from_db()
        if (
            operation.is_terminal
            and operation.final_seq is not None
            and operation.last_seq >= operation.final_seq
        ):
            return operation
        time.sleep(0.2)
    raise AssertionError(f"operation {operation.kind} still {operation.status} at {operation.stage!r}")
