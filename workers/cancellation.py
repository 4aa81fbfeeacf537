"""Cancel between steps: the panel sets a Redis key, the agent reads it before each step.

The key lives on the broker's Redis (the only thing an agent is sure to reach) under the same key prefix
as the broker's own keys, so test sessions sharing a Redis stay apart.
"""

import logging

import redis

from workers.broker import broker_key, broker_redis

log = logging.getLogger(__name__)

CANCEL_TTL_S = 7 * 24 * 3600  # long enough for any install; short enough to clean itself up


def cancel_key(operation_id: str) -> str:
    return broker_key(f"cancel:{operation_id}")


def request_cancel(operation_id: str) -> None:
    broker_redis().set(cancel_key(str(operation_id)), "1", ex=CANCEL_TTL_S)


def cancel_requested(operation_id: str) -> bool:
    """Whether the panel asked to cancel. A broker that is restarting is no reason to stop an install: the
    answer is then no, and the check before the next step asks again."""
    try:
        return bool(broker_redis().exists(cancel_key(str(operation_id))))
    except redis.RedisError as error:
        log.warning("cancel flag of %s not readable (%s); carrying on", operation_id, error)
        return False
