"""Stopping a deployment the gateway routes to without cutting its requests short.

A deployment leaves the gateway's pool the moment it is asked to stop, restart or go (it is no longer
observed running), so no new request reaches it. Requests already in flight through the gateway are counted
in Redis (panel.gateway.pool.outstanding); the stop sent to the agent waits until that count is 0, up to
PANEL_GATEWAY_DRAIN_GRACE_S, and the reconcile tick sends it once either happens. Rolling updates, scaling
down, stop, restart and delete all go through here, so an in-flight stream ends normally instead of
breaking when its engine is stopped."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext_noop

from panel.deployments import reasons
from panel.deployments.models import Deployment

log = logging.getLogger(__name__)


def in_flight(deployment: Deployment) -> int:
    """Gateway requests its engine serves now, across every web process. 0 when Redis cannot say: a broken
    Redis must not keep a deployment from stopping (the gateway cannot route without it either)."""
    from panel.gateway.pool import instance_ids, outstanding

    try:
        return sum(outstanding(instance) for instance in instance_ids(deployment))
    except Exception:  # redis-py raises several unrelated types; any of them means "cannot tell"
        log.warning("could not count %s's requests in flight; stopping it without a drain", deployment.name)
        return 0


def holds_stop(deployment: Deployment, now: datetime | None = None) -> bool:
    """Whether the stop of `deployment` waits for its in-flight requests. The first time it does, the grace
    period starts and the reason says so; the caller saves the row."""
    now = now or timezone.now()
    if deployment.drain_until is not None and now >= deployment.drain_until:
        return False
    count = in_flight(deployment)
    if count == 0:
        return False
    if deployment.drain_until is None:
        grace = settings.PANEL_GATEWAY_DRAIN_GRACE_S
        deployment.drain_until = now + timedelta(seconds=grace)
        deployment.set_reason(
            [
                *reasons.current(deployment),
                reasons.part(
                    gettext_noop("Draining: {n} requests in flight finish first (up to {s} s)."),
                    n=count,
                    s=int(grace),
                ),
            ]
        )
    return True
