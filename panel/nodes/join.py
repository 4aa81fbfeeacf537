"""Agent registration with a join token: scoped to one node name, expiring, single use."""

import secrets
from datetime import timedelta

from django.utils import timezone

from panel.accounts.models import hash_token
from panel.core.choices import NodeTransport
from panel.nodes.models import JoinToken, Node

JOIN_TOKEN_LIFETIME = timedelta(hours=24)


def issue_join_token(node_name: str, user=None, lifetime=JOIN_TOKEN_LIFETIME) -> str:
    raw = "apj_" + secrets.token_urlsafe(24)
    JoinToken.objects.create(
        node_name=node_name, key_hash=hash_token(raw), expires=timezone.now() + lifetime, created_by=user
    )
    return raw


def register_with_token(beat) -> Node | None:
    """Create the node a heartbeat names if its join token is valid for that name (claimed atomically)."""
    if not beat.join_token:
        return None
    claimed = JoinToken.objects.filter(
        key_hash=hash_token(beat.join_token),
        node_name=beat.node,
        used__isnull=True,
        expires__gt=timezone.now(),
    ).update(used=timezone.now())
    if claimed != 1:
        return None
    node, _ = Node.objects.get_or_create(name=beat.node, defaults={"transport": NodeTransport.AGENT})
    return node
