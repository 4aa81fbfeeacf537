from workers.inventory import run_inventory
from workers.task_names import AGENT_INVENTORY
from workers.tasks.base import agent_task
from workers.tasks.operation import run_operation


@agent_task(AGENT_INVENTORY)
def inventory(operation_id: str, start_seq: int = 0, target: dict | None = None) -> None:
    run_operation(operation_id, start_seq, run_inventory, target=target)
