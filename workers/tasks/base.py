"""The base of every agent task: run only what the panel signed for this agent, while it is fresh, once
(workers.identity, workers.nonces).

Acknowledged when it starts (not late): a delivery lost with a killed agent is re-sent by the panel's reaper
as a new attempt, instead of being redelivered by the broker's visibility timeout while the first attempt
may still run; the operation lease (workers.leases) makes any duplicate delivery harmless.

A task of an operation carries its delivery number (DISPATCH_KWARG, signed with the rest): the operation's
frame asks the panel whether that delivery is still wanted before its first step (workers.asking).
"""

import contextvars
import logging
from typing import NamedTuple

from celery import Task

from workers.celery_app import app
from workers.identity import AUTH_KWARG, DISPATCH_KWARG, Untrusted, check_task
from workers.nonces import first_sight

log = logging.getLogger(__name__)


class Delivery(NamedTuple):
    """The verified delivery a task runs for: the node it is for, who signed it, which sending it is."""

    node: str
    signer: str
    dispatch: int | None


current_delivery: contextvars.ContextVar[Delivery | None] = contextvars.ContextVar(
    "current_delivery", default=None
)


class AgentTask(Task):
    acks_late = False
    rejected = 0
    rejected_by_reason: dict[str, int] = {}

    def __call__(self, *args, **kwargs):
        task_id = self.request.id or ""
        try:
            seal = check_task(self.name, task_id, kwargs, first_sight=first_sight)
        except Untrusted as why:
            AgentTask.rejected += 1
            AgentTask.rejected_by_reason[why.reason] = AgentTask.rejected_by_reason.get(why.reason, 0) + 1
            log.error("refused task %s %s (%s): %s", self.name, task_id, why.reason, why)
            return None
        kwargs.pop(AUTH_KWARG, None)
        dispatch = kwargs.pop(DISPATCH_KWARG, None)
        token = current_delivery.set(Delivery(seal.node, seal.signer, dispatch))
        try:
            return super().__call__(*args, **kwargs)
        finally:
            current_delivery.reset(token)


def agent_task(name: str, **options):
    """Register an agent task that verifies the panel's signature before it runs."""
    return app.task(name=name, base=AgentTask, **options)
