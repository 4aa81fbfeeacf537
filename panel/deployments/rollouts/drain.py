"""Stopping a deployment the gateway routes to without cutting its requests short.

A deployment leaves the gateway's pool the moment it is asked to stop, restart or go (it is no longer
observed running), so no new request reaches it. Requests already in flight through the gateway are counted
in Redis (panel.gateway.instances.pool.outstanding); the stop sent to the agent waits until that count is 0
and no web process has picked the engine for a few seconds (one may still route by a pool copy read just
before), up to PANEL_GATEWAY_DRAIN_GRACE_S; the reconcile tick sends it once that happens. Rolling updates,
scaling down, stop, restart and delete all go through here, so an in-flight stream ends normally instead of
breaking when its engine is stopped."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext_noop

from panel.deployments import reasons
from panel.deployments.models import Deployment

log = logging.getLogger(__name__)

# Whether the gateway has requests in flight on a deployment's engines, or picked one of them just now: the
# gateway adds its answer in GatewayConfig.ready() (deployments sit below it and do not import it).
SERVING_CHECKS: list[Callable[[Deployment], bool]] = []


def still_served(deployment: Deployment) -> bool:
    """Whether the gateway serves requests on its engine now, or sent it one within the last few seconds
    (a web process may still route by a copy of the pool from before it left). False when Redis cannot
    say: a broken Redis must not keep a deployment from stopping (the gateway cannot route without it)."""
    try:
        return any(serves(deployment) for serves in SERVING_CHECKS)
    except Exception:  # redis-py raises several unrelated types; any of them means "cannot tell"
        log.warning(
            "could not ask Redis whether %s still serves; stopping it without a drain", deployment.name
        )
        return False


def holds_stop(deployment: Deployment, now: datetime | None = None) -> bool:
    """Whether the stop of `deployment` waits for its in-flight requests. The first time it does, the grace
    period starts and the reason says so; the caller saves the row."""
    now = now or timezone.now()
    if deployment.drain_until is not None and now >= deployment.drain_until:
        return False
    if not still_served(deployment):
        return False
    if deployment.drain_until is None:
        grace = settings.PANEL_GATEWAY_DRAIN_GRACE_S
        deployment.drain_until = now + timedelta(seconds=grace)
        draining = gettext_noop(
            "Draining: the requests in flight through the gateway finish first (up to {s} s)."
        )
        deployment.set_reason([*reasons.current(deployment), reasons.part(draining, s=int(grace))])
    return True
