from functools import partial

from workers.agent_install import run_install_agent
from workers.task_names import AGENT_INSTALL_AGENT
from workers.tasks.base import agent_task
from workers.tasks.operation import run_operation


@agent_task(AGENT_INSTALL_AGENT)
def install_agent(
    operation_id: str,
    start_seq: int = 0,
    target: dict | None = None,
    script: str = "",
    script_args=(),
    sealed_token: str = "",
) -> None:
    body = partial(run_install_agent, script=script, script_args=list(script_args), sealed_token=sealed_token)
    run_operation(operation_id, start_seq, body, target=target)
