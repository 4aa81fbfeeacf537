"""Agent registration with a join token: scoped to one node name, expiring, single use. The agent's install
script trades it once, over the panel's URL, for the node's own credential (panel.nodes.agents.trust) and, on
the fleet's RabbitMQ, the node's own broker user (panel.nodes.agents.broker_admin): never the panel's Redis.

A node name has at most one pending token: a new one cancels the one before. A token for a node that is
already joined (an agent node the panel knows and has not removed) would rotate its credential, so it is
refused unless the admin asked for that rotation when making it (`rotate_credential`, audited): a token
that leaked cannot take over a live node."""

import secrets
import shlex
from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from panel.accounts.models import hash_token
from panel.audit import actions as audit
from panel.audit.services import record
from panel.core.domain.choices import NodeTransport
from panel.nodes.agents import broker_admin
from panel.nodes.agents.trust import agent_key
from panel.nodes.models import JoinToken, Node, new_credential_id

JOIN_TOKEN_LIFETIME = timedelta(hours=24)
LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1"}


def issue_join_token(
    node_name: str, user=None, lifetime=JOIN_TOKEN_LIFETIME, *, rotate_credential: bool = False
) -> str:
    """A new join token for `node_name`; any pending one for that name stops working."""
    raw = "apj_" + secrets.token_urlsafe(24)
    with transaction.atomic():
        cancelled, _ = JoinToken.objects.filter(node_name=node_name, used__isnull=True).delete()
        JoinToken.objects.create(
            node_name=node_name,
            key_hash=hash_token(raw),
            expires=timezone.now() + lifetime,
            created_by=user,
            rotates_credential=rotate_credential,
        )
        record(
            user,
            audit.NODE_JOIN_TOKEN_ISSUED,
            node_name,
            rotate_credential=rotate_credential,
            cancelled_tokens=cancelled,
        )
    return raw


class JoinRefused(Exception):
    """The join token is unknown, used, expired or for another node name."""


def exchange_join_token(node_name: str, token: str) -> tuple[Node, bytes, str]:
    """Use up a join token (one winner under races) and issue the node's credential: a new node, or a new
    credential for a node that joins again (the old one stops working at once). On the fleet's broker the
    node's broker user is (re)created last, inside the transaction: when the broker refuses, nothing of the
    join is left (BrokerAdminError). Returns (node, its key, its broker password or "" on Redis)."""
    if not broker_admin.fleet_broker() and not settings.DEVELOPMENT_MODE:
        raise broker_admin.BrokerAdminError(
            "the panel's broker is its own Redis, whose address nodes must never get: agents on other hosts "
            "join through RabbitMQ; set CELERY_BROKER_URL=amqp://… and PANEL_BROKER_ADMIN_URL "
            "(docs/fleet-broker.md)"
        )
    with transaction.atomic():
        pending = JoinToken.objects.filter(
            key_hash=hash_token(token or ""),
            node_name=node_name,
            used__isnull=True,
            expires__gt=timezone.now(),
        )
        rotates = pending.values_list("rotates_credential", flat=True).first()
        if rotates is None or pending.update(used=timezone.now()) != 1:
            raise JoinRefused(
                "this join token is unknown, already used, expired or for another node: create a new one "
                "in the panel (Nodes → Add node)"
            )
        node, created = Node.objects.get_or_create(
            name=node_name, defaults={"transport": NodeTransport.AGENT}
        )
        if not created:
            if node.transport == NodeTransport.AGENT and not rotates:
                raise JoinRefused(
                    f"{node_name} is already joined and this token was not made to rotate its credential: "
                    "an admin makes one that does (the node's page → Join again)"
                )
            node.credential_id = new_credential_id()
            node.save(update_fields=["credential_id", "updated"])

        credential = "issued" if created else "rotated"
        record(None, audit.NODE_ADDED, node.name, transport="agent", joined=True, credential=credential)
        password = broker_admin.provision_node(node.name) if broker_admin.fleet_broker() else ""
    return node, agent_key(node), password


def agent_broker_url(panel_host: str, node_name: str = "", password: str = "") -> str:
    """The broker URL an agent should use: on RabbitMQ with the node's own user (when given) in place of
    the panel's. A broker on the panel's loopback is reached through the panel's host name; set
    PANEL_AGENT_BROKER_URL when agents see the broker under another address."""
    url = public_broker_url(panel_host)
    if node_name and broker_admin.fleet_broker():
        return broker_admin.node_broker_url(url, node_name, password)
    return url


def public_broker_url(panel_host: str) -> str:
    """The broker address agents dial, with the panel's own user removed on RabbitMQ."""
    url = _public_broker_url(panel_host)
    if broker_admin.fleet_broker():
        parts = urlsplit(url)
        return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    return url


def _public_broker_url(panel_host: str) -> str:
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
    url = public_broker_url(panel_host)
    return {"url": url, "configured": bool(settings.PANEL_AGENT_BROKER_URL), "loopback": is_loopback_url(url)}


INSTALL_SCRIPT_PATH = "/tmp/ascend-panel-install.sh"  # noqa: S108  the host's temp dir, where curl saves it


def join_command(panel_url: str, node_name: str, token: str, script_sha256: str, package_sha256: str) -> str:
    """The one line an admin runs on a new host: download the install script, check it against the sha256
    the panel pinned here, and run it with the token on stdin (never on a command line, where `ps` shows
    it). The script checks the agent package against its own pinned sha256, trades the token for the
    node's credential and the broker address over the panel's URL, and starts the agent."""
    panel_url = panel_url.rstrip("/")
    script = INSTALL_SCRIPT_PATH
    args = ["--panel", panel_url, "--node", node_name, "--package-sha256", package_sha256]
    return (
        f"curl -fsSL {shlex.quote(f'{panel_url}/nodes/agent/install.sh')} -o {script}"
        f" && echo {shlex.quote(f'{script_sha256}  {script}')} | sha256sum -c --quiet -"
        f" && printf '%s\\n' {shlex.quote(token)} | sudo bash {script} {shlex.join(args)}"
    )
