"""A RabbitMQ of the test session's own: a vhost with a random suffix on the machine's RabbitMQ (CI's .ci/run
installs and starts it), a panel user with full rights there, all deleted afterwards together with every
node user the session's joins made (their names carry the same suffix).

Absent RabbitMQ, the tests that need it are skipped with the reason, so `make test` works on a bare machine;
CI sets REQUIRE_RABBITMQ=1, which turns the skip into a failure."""

import os
import secrets
import uuid
from dataclasses import dataclass
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
import pytest

ADMIN_URL = os.environ.get("TEST_RABBITMQ_ADMIN_URL", "http://guest:guest@127.0.0.1:15672")
AMQP_ADDRESS = os.environ.get("TEST_RABBITMQ_ADDRESS", "127.0.0.1:5672")


@dataclass
class TestBroker:
    suffix: str
    vhost: str
    panel_url: str  # the panel's own user: full rights on the vhost
    admin_url: str  # the management API, for broker_admin (PANEL_BROKER_ADMIN_URL)

    __test__ = False  # not a test class, whatever its name

    @property
    def agent_url(self) -> str:
        """The address agents dial (PANEL_AGENT_BROKER_URL): no user in it, each node gets its own."""
        return f"amqp://{AMQP_ADDRESS}/{quote(self.vhost, safe='')}"

    def api(self, method: str, path: str, **kwargs) -> httpx.Response:
        parts = urlsplit(self.admin_url)
        base = urlunsplit(parts._replace(netloc=f"{parts.hostname}:{parts.port}"))
        auth = (parts.username or "", parts.password or "")
        return httpx.request(method, base + path, auth=auth, timeout=10, **kwargs)

    def node_name(self, label: str) -> str:
        """A node name for this session only (node users are broker-wide, not per vhost)."""
        return f"{label}-{self.suffix}"

    def close(self) -> None:
        """Delete the vhost and every user the session made: those whose name carries the suffix, and any
        other user given rights on this vhost only (a join under a fixed node name); never an
        administrator."""
        vhost = quote(self.vhost, safe="")
        granted = {grant["user"] for grant in self.api("GET", f"/api/vhosts/{vhost}/permissions").json()}
        elsewhere = {
            grant["user"]
            for grant in self.api("GET", "/api/permissions").json()
            if grant["vhost"] != self.vhost
        }
        self.api("DELETE", f"/api/vhosts/{vhost}")
        mine = [
            user["name"]
            for user in self.api("GET", "/api/users").json()
            if "administrator" not in _tags(user)
            and (self.suffix in user["name"] or (user["name"] in granted and user["name"] not in elsewhere))
        ]
        if mine:  # in one request: a fleet bench leaves hundreds of node users
            self.api("POST", "/api/users/bulk-delete", json={"users": mine})


def _tags(user: dict) -> list[str]:
    tags = user.get("tags") or []
    return tags.split(",") if isinstance(tags, str) else list(tags)


class BrokerUnavailable(Exception):
    """RabbitMQ's management API does not answer; the message says what to install."""


def scratch_broker(prefix: str = "ascend-test", admin_url: str = ADMIN_URL) -> TestBroker:
    """A vhost `<prefix>-<suffix>` and a panel user with every right there, on the machine's RabbitMQ (the
    tests, and bench/fleet.py); `close()` deletes both and every user whose name carries the suffix.
    Raises BrokerUnavailable when the management API does not answer."""
    suffix = uuid.uuid4().hex[:8]
    broker = TestBroker(suffix, f"{prefix}-{suffix}", "", admin_url)
    try:
        broker.api("GET", "/api/overview").raise_for_status()
    except httpx.HTTPError as error:
        raise BrokerUnavailable(
            f"RabbitMQ's management API is not reachable at {admin_url} ({error}): install rabbitmq-server "
            "and run `rabbitmq-plugins enable rabbitmq_management` (.ci/run does both)"
        ) from None
    vhost = quote(broker.vhost, safe="")
    user, password = f"panel-{suffix}", secrets.token_urlsafe(16)
    broker.api("PUT", f"/api/vhosts/{vhost}").raise_for_status()
    broker.api("PUT", f"/api/users/{user}", json={"password": password, "tags": ""}).raise_for_status()
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    broker.api("PUT", f"/api/permissions/{vhost}/{user}", json=everything).raise_for_status()
    broker.panel_url = f"amqp://{user}:{password}@{AMQP_ADDRESS}/{vhost}"
    return broker


def start_test_broker() -> TestBroker:
    """The test session's broker; without RabbitMQ the tests that need it are skipped (failed under
    REQUIRE_RABBITMQ)."""
    try:
        return scratch_broker()
    except BrokerUnavailable as error:
        if os.environ.get("REQUIRE_RABBITMQ"):
            pytest.fail(str(error))
        pytest.skip(str(error))
