"""The fault stack's own RabbitMQ node: the fleet's broker (docs/fleet-broker.md), killable with SIGKILL
without disturbing the machine's RabbitMQ, which other tests use at the same time.

Debian's rabbitmq-server is started from its real script (/usr/lib/rabbitmq/bin/rabbitmq-server, not the
/usr/sbin wrapper, which switches to the rabbitmq user and its shared files) with everything of its own: node
name, AMQP, distribution and management ports on loopback, data and logs under the stack's folder, a config
file, the Erlang cookie in a HOME of its own, and an empty rabbitmq-env.conf in place of /etc/rabbitmq's
(which names the machine's node). RUNNING_UNDER_SYSTEMD makes the script exec the Erlang VM, so the pid the
stack holds is the broker's own and SIGKILL hits it, not a shell; a restart with the same environment finds
its users, vhost, queues and persistent messages again in its data folder.

Absent rabbitmq-server, the tier is skipped with the reason (a failure under REQUIRE_RABBITMQ=1, as
tests/rabbitmq.py does).
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import httpx

from panel.run import free_port
from tests.tls_certs import ServerFiles

RABBITMQ_SERVER = os.environ.get("FAULTS_RABBITMQ_SERVER", "/usr/lib/rabbitmq/bin/rabbitmq-server")
VHOST = "ascend"
ADMIN_USER = "faults-admin"
PANEL_USER = "panel"


def rabbitmq_missing() -> str:
    """Why this machine cannot run a RabbitMQ node of the stack's own ("" when it can)."""
    if not os.access(RABBITMQ_SERVER, os.X_OK):
        return (
            f"rabbitmq-server is not installed ({RABBITMQ_SERVER} not found): the fault tier runs the fleet "
            "setup on a RabbitMQ node of its own (apt-get install rabbitmq-server; .ci/run does)"
        )
    if shutil.which("erl") is None:
        return "Erlang (erl) is not on PATH: rabbitmq-server cannot start"
    return ""


class BrokerNode:
    """One RabbitMQ node under `directory`; `argv` and `env` start it (and start it again after a kill)."""

    def __init__(self, directory: Path, tls: ServerFiles | None = None):
        """With `tls`, the node also has an amqps listener on `tls_port` (clients show no certificate)."""
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.node_name = f"faults-{uuid.uuid4().hex[:8]}@localhost"
        self.amqp_port, self.dist_port, self.admin_port = free_port(), free_port(), free_port()
        self.tls_port = free_port() if tls else None
        self.admin_password = secrets.token_urlsafe(18)
        self.panel_password = secrets.token_urlsafe(18)
        (self.dir / "rabbitmq-env.conf").write_text("")
        (self.dir / "enabled_plugins").write_text("[rabbitmq_management].\n")
        config = [
            f"listeners.tcp.local = 127.0.0.1:{self.amqp_port}",
            "management.tcp.ip = 127.0.0.1",
            f"management.tcp.port = {self.admin_port}",
            f"default_user = {ADMIN_USER}",
            f"default_pass = {self.admin_password}",
            "default_user_tags.administrator = true",
        ]
        if tls:
            config += [
                f"listeners.ssl.local = 127.0.0.1:{self.tls_port}",
                f"ssl_options.cacertfile = {tls.cafile}",
                f"ssl_options.certfile = {tls.certfile}",
                f"ssl_options.keyfile = {tls.keyfile}",
                "ssl_options.verify = verify_none",
                "ssl_options.fail_if_no_peer_cert = false",
            ]
        (self.dir / "rabbitmq.conf").write_text("\n".join([*config, ""]))

    @property
    def argv(self) -> list[str]:
        return [RABBITMQ_SERVER]

    @property
    def env(self) -> dict:
        return {
            "HOME": str(self.dir),  # the Erlang cookie of this node only
            "RABBITMQ_CONF_ENV_FILE": str(self.dir / "rabbitmq-env.conf"),
            "RABBITMQ_CONFIG_FILE": str(self.dir / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.dir / "enabled_plugins"),
            "RABBITMQ_NODENAME": self.node_name,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.amqp_port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.dir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.dir / "log"),
            "RABBITMQ_LOGS": "-",  # to the program's log file, beside the stack's others
            "RABBITMQ_PID_FILE": str(self.dir / "rabbitmq.pid"),
            "RUNNING_UNDER_SYSTEMD": "1",  # exec the VM: the pid held is the broker's
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_FLAGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }

    # -- addresses ------------------------------------------------------------------------------------
    @property
    def admin_url(self) -> str:
        """PANEL_BROKER_ADMIN_URL: the management API, where the panel creates node users."""
        return f"http://{ADMIN_USER}:{quote(self.admin_password, safe='')}@127.0.0.1:{self.admin_port}"

    @property
    def panel_url(self) -> str:
        """CELERY_BROKER_URL of the panel's processes: its own user, every right on the vhost."""
        return f"amqp://{PANEL_USER}:{quote(self.panel_password, safe='')}@127.0.0.1:{self.amqp_port}/{VHOST}"

    @property
    def agent_url(self) -> str:
        """PANEL_AGENT_BROKER_URL: the address agents dial, no user in it (each node gets its own)."""
        return f"amqp://127.0.0.1:{self.amqp_port}/{VHOST}"

    # -- management API --------------------------------------------------------------------------------
    def api(self, method: str, path: str, **kwargs) -> httpx.Response:
        return httpx.request(
            method,
            f"http://127.0.0.1:{self.admin_port}{path}",
            auth=(ADMIN_USER, self.admin_password),
            timeout=10,
            **kwargs,
        )

    def wait_ready(self, timeout: float = 90) -> None:
        """Until the management API answers and the AMQP listener accepts (it opens last)."""
        from panel.run import wait_for_port

        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.api("GET", "/api/overview").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"RabbitMQ node {self.node_name} did not start (see its log)")
            time.sleep(0.5)
        wait_for_port(self.amqp_port, timeout=max(5, deadline - time.monotonic()))

    def provision(self) -> None:
        """The panel's vhost and its own user there with every right, as an operator sets up the fleet's
        broker once (node users are the panel's business: panel.nodes.agents.broker_admin)."""
        user = quote(PANEL_USER, safe="")
        self.api("PUT", f"/api/vhosts/{VHOST}").raise_for_status()
        credentials = {"password": self.panel_password, "tags": ""}
        self.api("PUT", f"/api/users/{user}", json=credentials).raise_for_status()
        everything = {"configure": ".*", "write": ".*", "read": ".*"}
        self.api("PUT", f"/api/permissions/{VHOST}/{user}", json=everything).raise_for_status()
