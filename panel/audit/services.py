"""record(): the one way anything writes the audit log; prune(): drop what is older than the retention.

Services call record() with the user they act for; the request (for the address and, when the service does
not know its user, the actor) is the one being served (AuditRequestMiddleware) unless one is passed. Work
with no request (Celery, the shell) is recorded without an address.
"""

import ipaddress
import json
import logging
from contextvars import ContextVar
from datetime import timedelta

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone

from panel.audit.models import AuditEntry
from panel.core.web.client_ip import client_ip

log = logging.getLogger(__name__)

current_request: ContextVar = ContextVar("panel_audit_request", default=None)


def _address(request) -> str | None:
    raw = client_ip(request) if request is not None else None
    try:
        return str(ipaddress.ip_address(raw)) if raw else None
    except ValueError:
        return None


def _actor(actor, request):
    """(user or None, name) from a user, a user name (a failed sign-in) or None (the request's user)."""
    if actor is None and request is not None:
        user = getattr(request, "user", None)
        actor = user if user is not None and user.is_authenticated else None
    if actor is None:
        return None, ""
    if isinstance(actor, str):
        return None, actor[:150]
    return (actor if actor.pk else None), actor.get_username()


def _plain(details: dict) -> dict:
    """JSON-safe details: dates, UUIDs and lazy strings as text."""
    return json.loads(json.dumps(details, cls=DjangoJSONEncoder, default=str))


def record(actor, action: str, target="", request=None, **details) -> AuditEntry:
    """Write one entry: `actor` (a user, a user name, or None for the current request's user), an action
    constant from panel.audit.actions, the target's name, and anything worth keeping as details."""
    request = request if request is not None else current_request.get()
    user, name = _actor(actor, request)
    return AuditEntry.objects.create(
        actor=user,
        actor_name=name,
        action=action,
        target=str(target)[:255],
        ip=_address(request),
        details=_plain(details),
    )


def prune(now=None) -> int:
    """Delete entries older than PANEL_AUDIT_RETENTION_DAYS. Returns how many went."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.PANEL_AUDIT_RETENTION_DAYS)
    deleted, _by_model = AuditEntry.objects.filter(time__lt=cutoff).delete()
    if deleted:
        log.info("audit: pruned %d entries older than %s", deleted, cutoff.isoformat())
    return deleted
