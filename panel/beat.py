"""Beat with a leader lock: run two (or more) beat processes, exactly one of them ticks.

    celery -A panel.celery beat --scheduler panel.beat:LeaderScheduler

Every beat process tries to hold one key in the panel's Redis (SET NX with a TTL). The holder renews it
on every tick (at least once a second) and sends the due tasks; the others poll once a second and take
the key over when the holder stops renewing it: at once when it stops cleanly (it deletes the key), within
PANEL_BEAT_LEADER_TTL_S when it is killed.

When each entry last ran is kept beside the lock, in a Redis hash, not in a local schedule file: the new
leader carries on the old one's schedule (a daily prune does not start its day again at every failover),
and two beats never share one shelve file.

Why a lease is enough here: everything beat sends is an idempotent sweep (reaper, reconcile, downsample,
prune). A leader that stalls past its TTL and ticks once more beside the new one sends a sweep twice, which
costs a little work and breaks nothing. While Redis is unreachable nobody holds the lock, so nobody ticks;
the sweeps resume with Redis.
"""

import contextlib
import logging
import os
import socket
import uuid
from datetime import datetime

import redis
from celery.beat import Scheduler
from django.conf import settings

log = logging.getLogger(__name__)

POLL_S = 1.0

# Renew only while we still hold the key: a lock another process took over is never extended.
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


def lock_key() -> str:
    return f"{settings.PANEL_BEAT_KEY}:leader"


def last_run_key() -> str:
    return f"{settings.PANEL_BEAT_KEY}:last-run"


class LeaderScheduler(Scheduler):
    def __init__(self, *args, **kwargs):
        self.redis = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
        self.me = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.leading = False
        kwargs["max_interval"] = POLL_S
        super().__init__(*args, **kwargs)

    def setup_schedule(self):
        super().setup_schedule()
        try:
            last_runs = self.redis.hgetall(last_run_key())
        except redis.RedisError as error:
            log.warning("beat: last runs not readable (%s); every entry starts its interval now", error)
            return
        for raw_name, raw_when in last_runs.items():
            entry = self.schedule.get(raw_name.decode())
            if entry is None:
                continue
            try:
                entry.last_run_at = datetime.fromisoformat(raw_when.decode())
            except ValueError:
                log.warning("beat: ignoring a last run of %s that is not a time: %r", entry.name, raw_when)

    def tick(self, *args, **kwargs):
        if not self._hold_lock():
            return POLL_S
        return min(super().tick(*args, **kwargs), POLL_S)

    def reserve(self, entry):
        new_entry = super().reserve(entry)
        try:
            self.redis.hset(last_run_key(), entry.name, new_entry.last_run_at.isoformat())
        except redis.RedisError as error:
            log.warning("beat: last run of %s not recorded (%s)", entry.name, error)
        return new_entry

    def close(self):
        if self.leading:
            with contextlib.suppress(redis.RedisError):  # else the key expires by itself
                self.redis.eval(_RELEASE, 1, lock_key(), self.me)
            self.leading = False
        super().close()

    def _hold_lock(self) -> bool:
        ttl_ms = int(settings.PANEL_BEAT_LEADER_TTL_S * 1000)
        try:
            if self.leading and self.redis.eval(_RENEW, 1, lock_key(), self.me, ttl_ms):
                return True
            now_leading = bool(self.redis.set(lock_key(), self.me, nx=True, px=ttl_ms))
        except redis.RedisError as error:
            if self.leading:
                log.warning("beat: Redis unreachable (%s); stopping ticks until it answers", error)
            self.leading = False
            return False
        if now_leading != self.leading:
            log.info("beat: %s", "leading: this beat ticks" if now_leading else "standing by")
            if now_leading:
                self.setup_schedule()  # carry on from what the last leader recorded
                self._heap = None
        self.leading = now_leading
        return now_leading


def beat_schedule() -> dict:
    """What beat sends and how often (seconds), from the settings of the process that calls it."""
    return {
        "mark-silent-nodes-offline": {"task": "panel.mark_silent_nodes_offline", "schedule": 2.0},
        # Sends what the broker did not take, ends operations whose agent is gone, re-sends lost attempts.
        "reap-operations": {"task": "panel.reap_operations", "schedule": settings.PANEL_REAP_S},
        # Metrics and liveness of SSH nodes: due ones get a sample task on the central agent's queue.
        "dispatch-ssh-probes": {"task": "panel.dispatch_ssh_probes", "schedule": 1.0},
        "monitoring-downsample": {"task": "panel.monitoring.downsample", "schedule": 60.0},
        "monitoring-prune": {"task": "panel.monitoring.prune", "schedule": 3600.0},
        "audit-prune": {"task": "panel.audit.prune", "schedule": 86400.0},
        "idempotency-prune": {"task": "panel.accounts.prune_idempotent_answers", "schedule": 3600.0},
        # Gateway usage: Redis list → rows and hourly roll-ups; raw rows and roll-ups pruned daily.
        "gateway-drain-usage": {
            "task": "panel.gateway.drain_usage",
            "schedule": settings.PANEL_GATEWAY_USAGE_DRAIN_S,
        },
        "gateway-prune-usage": {"task": "panel.gateway.prune_usage", "schedule": 86400.0},
        # Instances on failed NPUs or draining nodes, for every gateway process (also sent at each change).
        "gateway-publish-excluded": {"task": "panel.gateway.publish_excluded", "schedule": 10.0},
        "reconcile-deployments": {
            "task": "panel.reconcile_deployments",
            "schedule": settings.PANEL_DEPLOY_RECONCILE_S,
        },
    }
