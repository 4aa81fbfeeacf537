"""The base of every agent task: run only what the panel signed for this agent (workers.identity).

Acknowledged when it starts (not late): a delivery lost with a killed agent is re-sent by the panel's reaper
as a new attempt, instead of being redelivered by the broker's visibility timeout while the first attempt
may still run; the operation lease (workers.leases) makes any duplicate delivery harmless.
"""

import logging

from celery import Task

from workers.celery_app import app
from workers.identity import AUTH_KWARG, Untrusted, check_task

log = logging.getLogger(__name__)


class AgentTask(Task):
    acks_late = False
    rejected = 0

    def __call__(self, *args, **kwargs):
        task_id = self.request.id or ""
        try:
            check_task(self.name, task_id, kwargs)
        except Untrusted as why:
            AgentTask.rejected += 1
            log.error("refused task %s %s: %s", self.name, task_id, why)
            return None
        kwargs.pop(AUTH_KWARG, None)
        return super().__call__(*args, **kwargs)


def agent_task(name: str, **options):
    """Register an agent task that verifies the panel's signature before it runs."""
    return app.task(name=name, base=AgentTask, **options)
