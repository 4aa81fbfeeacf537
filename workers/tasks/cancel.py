"""The panel's cancel request, verified like every task (workers.tasks.base) and kept on the agent's disk
for the running operation to read between steps (workers.cancellation)."""

from workers.cancellation import record_cancel
from workers.task_names import AGENT_CANCEL_OPERATION
from workers.tasks.base import agent_task


@agent_task(AGENT_CANCEL_OPERATION)
def cancel_operation(operation_id: str, target: dict | None = None) -> bool:
    """`target` is the SSH node's, when the central agent runs that node's install: the flag is its own."""
    record_cancel(operation_id)
    return True
