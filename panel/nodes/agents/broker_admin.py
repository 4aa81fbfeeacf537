"""The fleet broker's node users, through RabbitMQ's management HTTP API (PANEL_BROKER_ADMIN_URL).

Each agent node gets its own RabbitMQ user `node.<name>` when it joins, with a random password that only
its join answer carries. On the panel's vhost that user may configure nothing (the panel declares every
exchange and queue, workers.topology), write only to the ingest exchange and read only its own queue
`node.<name>`. Joining again replaces the password (and closes the old one's connections); removing the
node deletes the user, its connections and its queue. A stolen node therefore reaches that node's queue and
the ingest exchange, nothing else. The central agent gets a user of the same kind (PANEL_BROKER_CENTRAL_USER,
`central`), whose one queue is `ssh-runner` (`manage.py agent_credential --central --broker`).

Only used when the panel's broker is RabbitMQ (CELERY_BROKER_URL amqp://…): make run's embedded Redis has
no users, which is why it is not the fleet setup.
"""

import functools
import logging
import re
import secrets
import ssl
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
from django.conf import settings

from workers.celery_app import app as celery_app
from workers.task_names import SSH_RUNNER_QUEUE, node_queue
from workers.topology import INGEST_EXCHANGE, INGEST_QUEUE, agent_queue, declare, is_amqp, vhost_of

log = logging.getLogger(__name__)

TIMEOUT_S = 5.0


class BrokerAdminError(Exception):
    """The broker's management API could not be reached or refused a change; the message says which."""


def fleet_broker() -> bool:
    """Whether the panel runs the fleet setup (RabbitMQ with per-node users)."""
    return is_amqp(settings.CELERY_BROKER_URL)


def node_user(node_name: str) -> str:
    return node_queue(node_name)  # the user is named like the one queue it may read


def agent_permissions(queue: str) -> dict:
    """An agent's rights: configure nothing, write to the ingest exchange, read its one queue."""
    return {"configure": "^$", "write": f"^{re.escape(INGEST_EXCHANGE)}$", "read": f"^{re.escape(queue)}$"}


def node_permissions(node_name: str) -> dict:
    return agent_permissions(node_queue(node_name))


def _vhost() -> str:
    return quote(vhost_of(settings.CELERY_BROKER_URL), safe="")


def _request(method: str, path: str, **kwargs) -> httpx.Response:
    """One call to the management API; an error names the setting and what failed."""
    admin_url = settings.PANEL_BROKER_ADMIN_URL
    if not admin_url:
        raise BrokerAdminError(
            "PANEL_BROKER_ADMIN_URL is not set: the panel needs RabbitMQ's management API (e.g. "
            "http://admin:PASSWORD@rabbitmq:15672, plugin rabbitmq_management) to create node users"
        )
    parts = urlsplit(admin_url)
    base = urlunsplit(parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "")))
    auth = (parts.username or "", parts.password or "")
    try:
        response = httpx.request(
            method, base.rstrip("/") + path, auth=auth, timeout=TIMEOUT_S, verify=_admin_verify(), **kwargs
        )
    except httpx.HTTPError as error:
        raise BrokerAdminError(
            f"the broker's management API at {base} is unreachable ({error.__class__.__name__}: {error}); "
            "check PANEL_BROKER_ADMIN_URL and that the rabbitmq_management plugin is enabled"
        ) from None
    if response.status_code >= 400 and not (method == "DELETE" and response.status_code == 404):
        raise BrokerAdminError(
            f"the broker's management API refused {method} {path}: HTTP {response.status_code} "
            f"{response.text[:200]}; check the user in PANEL_BROKER_ADMIN_URL is an administrator"
        )
    return response


def _admin_verify() -> ssl.SSLContext:
    """An https management API is checked against the broker's CA when the panel has one, else against the
    system's CAs."""
    return _tls_context(settings.PANEL_BROKER_CA_FILE)


@functools.lru_cache(maxsize=4)
def _tls_context(ca_file: str) -> ssl.SSLContext:
    # Built once per process (a CA replaced at the same path is read at the next restart): loading the CAs
    # for every call made a burst of joins, four calls each, spend most of its CPU here.
    return ssl.create_default_context(cafile=ca_file or None)


def provision_node(node_name: str) -> str:
    """Create (or re-create, with a new password) the node's broker user, its permissions and its queue.
    Returns the password. On failure nothing of it is left: the user is deleted again."""
    return _provision_agent(node_user(node_name), node_queue(node_name))


def central_user() -> str:
    return settings.PANEL_BROKER_CENTRAL_USER  # no node's user clashes: theirs are node.<name>


def provision_central() -> str:
    """The same for the central agent: its user, queue ssh-runner. Returns the password."""
    return _provision_agent(central_user(), SSH_RUNNER_QUEUE)


def _provision_agent(user_name: str, queue: str) -> str:
    user = quote(user_name, safe="")
    password = secrets.token_urlsafe(32)
    _request("PUT", f"/api/users/{user}", json={"password": password, "tags": ""})
    _close_connections(user_name)  # a re-join: whoever still holds the old password is cut off
    try:
        _request("PUT", f"/api/permissions/{_vhost()}/{user}", json=agent_permissions(queue))
        limit_user(user_name)
        with celery_app.connection_for_write(settings.CELERY_BROKER_URL) as connection:
            declare(connection, [agent_queue(queue)])
    except Exception as error:
        _request("DELETE", f"/api/users/{user}")
        if isinstance(error, BrokerAdminError):
            raise
        raise BrokerAdminError(f"the queue {queue} could not be declared on the broker: {error}") from None
    log.info("broker user %s created with its permissions", user_name)
    return password


def user_limits() -> dict[str, int]:
    return {
        "max-connections": settings.PANEL_BROKER_NODE_MAX_CONNECTIONS,
        "max-channels": settings.PANEL_BROKER_NODE_MAX_CHANNELS,
    }


def limit_user(user_name: str) -> None:
    """Bound what one agent's user may hold open on the broker (RabbitMQ's per-user limits): a stolen node
    opening thousands of connections or channels exhausts its own limit, not the broker's memory and file
    handles every other node needs."""
    user = quote(user_name, safe="")
    for limit, value in user_limits().items():
        _request("PUT", f"/api/user-limits/{user}/{limit}", json={"value": value})


# RabbitMQ checks a permission on the target of a passive queue.declare from 4.2.6 (and 4.3.0) on; before, any
# user could learn the message and consumer counts of any queue whose name it knows (another node's).
PASSIVE_DECLARE_CHECKED_FROM = (4, 2, 6)


def broker_version() -> tuple[int, ...]:
    text = _request("GET", "/api/overview").json().get("rabbitmq_version", "0")
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def passive_declares_checked() -> bool:
    """Whether this broker refuses a node's passive declare of a queue it has no permission on."""
    return broker_version() >= PASSIVE_DECLARE_CHECKED_FROM


INGEST_POLICY = "ascend-panel-ingest-bound"


def bound_ingest_queue() -> None:
    """Set the policy that bounds the ingest queue (PANEL_INGEST_MAX_MESSAGES, PANEL_INGEST_MAX_BYTES):
    past it RabbitMQ refuses a publish (reject-publish), which the sender sees through its publisher
    confirm and keeps (the agent's spool), instead of the broker growing without end. A policy, not queue
    arguments, so that a queue declared by an older panel is bounded too without being re-declared."""
    definition = {
        "max-length": settings.PANEL_INGEST_MAX_MESSAGES,
        "max-length-bytes": settings.PANEL_INGEST_MAX_BYTES,
        "overflow": "reject-publish",
    }
    body = {
        "pattern": f"^{re.escape(INGEST_QUEUE)}$",
        "definition": definition,
        "apply-to": "queues",
        "priority": 10,  # RabbitMQ applies one policy per queue: this one above a site's catch-all
    }
    _request("PUT", f"/api/policies/{_vhost()}/{INGEST_POLICY}", json=body)
    log.info("ingest queue bounded at %s", definition)
    if not passive_declares_checked():
        log.warning(
            "RabbitMQ %s lets any node read the message counts of other nodes' queues (passive declares are "
            "checked from 4.2.6 on): upgrade the broker",
            ".".join(map(str, broker_version())),
        )


def deprovision_node(node_name: str) -> None:
    """Delete the node's broker user, close its connections and drop its queue (what was queued for it)."""
    user = quote(node_user(node_name), safe="")
    _request("DELETE", f"/api/users/{user}")
    close_connections(node_name)
    _request("DELETE", f"/api/queues/{_vhost()}/{quote(node_queue(node_name), safe='')}")
    log.info("broker user %s deleted", node_user(node_name))


def close_connections(node_name: str) -> None:
    _close_connections(node_user(node_name))


def _close_connections(user_name: str) -> None:
    user = quote(user_name, safe="")
    _request("DELETE", f"/api/connections/username/{user}", headers={"X-Reason": "agent user replaced"})


def node_broker_url(public_url: str, node_name: str, password: str) -> str:
    """`public_url` (the address agents dial) with the node's own user and password in it."""
    return user_broker_url(public_url, node_user(node_name), password)


def user_broker_url(public_url: str, user_name: str, password: str) -> str:
    parts = urlsplit(public_url)
    host = parts.netloc.rpartition("@")[2]
    userinfo = f"{quote(user_name, safe='')}:{quote(password, safe='')}"
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{host}"))


def broker_ca_pem() -> str:
    """The CA certificate agents pin for amqps:// (PANEL_BROKER_CA_FILE), or "" without one."""
    path = settings.PANEL_BROKER_CA_FILE
    if not path:
        return ""
    with open(path, encoding="ascii") as handle:
        return handle.read()
