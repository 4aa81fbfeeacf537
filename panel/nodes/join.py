"""Agent registration with a join token: scoped to one node name, expiring, single use."""

import secrets
import shlex
from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.utils import timezone

from panel.accounts.models import hash_token
from panel.core.choices import NodeTransport
from panel.nodes.models import JoinToken, Node

JOIN_TOKEN_LIFETIME = timedelta(hours=24)
LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1"}


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
    if not claim_join_token(beat):
        return None
    node, _ = Node.objects.get_or_create(name=beat.node, defaults={"transport": NodeTransport.AGENT})
    return node


def claim_join_token(beat) -> bool:
    """Use up the heartbeat's join token if it is valid for the node it names (one winner under races)."""
    if not beat.join_token:
        return False
    claimed = JoinToken.objects.filter(
        key_hash=hash_token(beat.join_token),
        node_name=beat.node,
        used__isnull=True,
        expires__gt=timezone.now(),
    ).update(used=timezone.now())
    return claimed == 1


def agent_broker_url(panel_host: str) -> str:
    """The broker URL an agent should use. A broker on the panel's loopback is reached through the panel's
    host name; set PANEL_AGENT_BROKER_URL when agents see the broker under another address."""
    configured = settings.PANEL_AGENT_BROKER_URL
    if configured:
        return configured
    url = urlsplit(settings.CELERY_BROKER_URL)
    panel_host = urlsplit(f"//{panel_host}").hostname or ""  # drop the port of a Host header
    if url.hostname in LOOPBACK_NAMES and panel_host:
        userinfo = url.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@" if userinfo else ""
        netloc += panel_host + (f":{url.port}" if url.port else "")
        return urlunsplit(url._replace(netloc=netloc))
    return settings.CELERY_BROKER_URL


def is_loopback_url(url: str) -> bool:
    """True when a broker URL names this machine only: an agent on another host cannot reach it."""
    host = urlsplit(url).hostname or ""
    return host in LOOPBACK_NAMES or host.startswith("127.")


def agent_broker(panel_host: str) -> dict:
    """What the Add node page shows about the broker address agents get: the URL, whether it came from
    PANEL_AGENT_BROKER_URL, and whether it is loopback (then only an agent on the panel's machine works)."""
    url = agent_broker_url(panel_host)
    return {"url": url, "configured": bool(settings.PANEL_AGENT_BROKER_URL), "loopback": is_loopback_url(url)}


def join_command(panel_url: str, node_name: str, token: str | None, broker_url: str) -> str:
    """The one line an admin runs on a new host to install the agent and register it."""
    panel_url = panel_url.rstrip("/")
    args = ["--panel", panel_url, "--node", node_name]
    if token:
        args += ["--token", token]
    args += ["--broker", broker_url]
    script = shlex.quote(f"{panel_url}/nodes/agent/install.sh")
    return f"curl -fsSL {script} | sudo bash -s -- {shlex.join(args)}"
