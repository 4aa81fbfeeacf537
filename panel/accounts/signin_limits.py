"""Limits on password guessing beside django-axes' per-(user name, address) lockout.

- Per account: a user name that failed PANEL_SIGNIN_ACCOUNT_FAILURE_LIMIT times within the cool-off, from
  any number of addresses, is refused everywhere until the cool-off passes (or an admin runs
  `manage.py axes_reset_username`). Spraying one account from many addresses is bounded; the limit is
  higher than the per-address one, so a single guesser still cannot lock the real user out.
- Across the panel: past PANEL_SIGNIN_ALARM_FAILURES_PER_MINUTE failed sign-ins in one clock minute, an
  audit entry (signin.failure_alarm) is written once for that minute, and /metrics shows
  `panel_signin_failure_alarm` 1 (with the running `panel_signin_failures_total`).

The per-account count is axes' own record (AccessAttempt rows of that user name); the per-minute count
lives in the panel's cache, so every web process adds to the same one.
"""

import logging
import time
from datetime import UTC, datetime

from axes.models import AccessAttempt
from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.db.models import Sum
from django.utils import timezone
from redis.exceptions import RedisError

from panel.audit import actions
from panel.audit.services import record

log = logging.getLogger(__name__)

ACCOUNT_SCOPE = "account"
FAILURES_TOTAL = "signin-failures:total"


def _minute_key(minute: int) -> str:
    return f"signin-failures:minute:{minute}"


def account_failures(username: str) -> int:
    """Failed sign-ins of `username` within the cool-off, from every address."""
    since = timezone.now() - settings.AXES_COOLOFF_TIME
    found = AccessAttempt.objects.filter(username=username, attempt_time__gte=since).aggregate(
        n=Sum("failures_since_start")
    )
    return found["n"] or 0


class AccountLimitBackend:
    """An authentication backend after axes' own: it authenticates nobody, it refuses a password sign-in
    to an account over its limit (as axes does, so its middleware answers with the lockout response)."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        limit = settings.PANEL_SIGNIN_ACCOUNT_FAILURE_LIMIT
        if request is None or not username or not limit:
            return None
        if account_failures(username) < limit:
            return None
        request.axes_locked_out = True
        request.axes_credentials = {"username": username}
        request.panel_lockout_scope = ACCOUNT_SCOPE
        record(username, actions.SIGNIN_LOCKED_OUT, username, request=request, scope=ACCOUNT_SCOPE)
        raise PermissionDenied

    # No get_user: a session names the backend that signed it in (ModelBackend), and Django's force_login
    # picks the first backend with one.


def count_failure(sender, credentials=None, request=None, **kwargs) -> None:
    """user_login_failed: add to the panel-wide counts; raise the alarm when this minute passes the
    threshold (once per minute)."""
    minute = int(time.time() // 60)
    try:
        cache.add(FAILURES_TOTAL, 0, None)
        cache.incr(FAILURES_TOTAL)
        key = _minute_key(minute)
        cache.add(key, 0, 180)
        this_minute = cache.incr(key)
    except RedisError as error:
        log.warning("sign-in failure not counted: Redis unavailable (%s)", error)
        return
    threshold = settings.PANEL_SIGNIN_ALARM_FAILURES_PER_MINUTE
    if threshold and this_minute == threshold:
        log.warning("%d failed sign-ins across the panel this minute: alarm", this_minute)
        record(
            None,
            actions.SIGNIN_FAILURE_ALARM,
            "panel",
            request=request,
            failures=this_minute,
            threshold=threshold,
            minute=datetime.fromtimestamp(minute * 60, tz=UTC).isoformat(),
        )


def failure_figures() -> dict:
    """What /metrics shows: failed sign-ins so far, in the last two clock minutes, and whether the alarm is
    up (this minute or the one before passed the threshold)."""
    minute = int(time.time() // 60)
    found = cache.get_many([FAILURES_TOTAL, _minute_key(minute), _minute_key(minute - 1)])
    recent = [found.get(_minute_key(minute), 0), found.get(_minute_key(minute - 1), 0)]
    threshold = settings.PANEL_SIGNIN_ALARM_FAILURES_PER_MINUTE
    return {
        "total": found.get(FAILURES_TOTAL, 0),
        "alarm": bool(threshold) and max(recent) >= threshold,
    }
