"""A real web server (panel.web: uvicorn) serving panel.asgi for the integration tier, beside its
in-process Celery worker (see tests/integration/conftest.py): the same test database (the session's SQLite
file, or CI's PostgreSQL test database), the same Redis, the same channel-layer and Celery key prefixes. What
the server asks of an agent reaches the worker, and what the worker broadcasts reaches the server's waiting
requests.

    def test_it(live_web, ...):
        httpx.get(f"{live_web.url}/api/v1/deployments/", headers=...)
        live_web.thread_count()      # threads of the server process now

Module-scoped: the server starts once per test module (a few seconds); rows come and go with each test's
transactional database. Use it from tests marked `django_db(transaction=True)`, since the server only
sees committed rows.
"""

import os
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from panel import web
from panel.run import _die_with_parent, free_port
from tests.deployment_helpers import free_port_pair

REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 60


class LiveWeb:
    def __init__(self, process: subprocess.Popen, port: int, log_path: Path):
        self.process = process
        self.url = f"http://127.0.0.1:{port}"
        self.ws_url = f"ws://127.0.0.1:{port}"
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.process.pid

    def thread_count(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/task"))

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def database_url(settings_dict: dict) -> str:
    """The URL (as DATABASE_URL) of the database the test process uses, which is the test database."""
    engine, name = settings_dict["ENGINE"], settings_dict["NAME"]
    if engine.endswith("sqlite3"):
        return f"sqlite:///{name}"
    if engine.endswith("postgresql"):
        user = quote(settings_dict.get("USER") or "")
        password = quote(settings_dict.get("PASSWORD") or "")
        credentials = f"{user}:{password}@" if user else ""
        port = f":{settings_dict['PORT']}" if settings_dict.get("PORT") else ""
        return f"postgres://{credentials}{settings_dict.get('HOST') or 'localhost'}{port}/{name}"
    raise NotImplementedError(f"no live web server for {engine}")


def start_web(port: int, env: dict, log_path: Path) -> subprocess.Popen:
    """The panel's web server (panel.web) on 127.0.0.1:`port`, its output appended to `log_path`."""
    with log_path.open("ab") as log:
        return subprocess.Popen(
            web.argv("127.0.0.1", port),
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )


@pytest.fixture(scope="module")
def live_web(_wired_to_redis, test_prefix, django_db_setup, tmp_path_factory):
    from django.db import connection

    port = free_port()
    log_path = tmp_path_factory.mktemp("web") / "web.log"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.live_web_settings",
        "PANEL_MODE": "test",
        "DATABASE_URL": database_url(connection.settings_dict),
        "REDIS_URL": _wired_to_redis,
        "PANEL_TEST_PREFIX": test_prefix,
        # Engines away from 18000 and from other sessions' (the server plans the ports).
        "PANEL_DEPLOY_BASE_PORT": str(free_port_pair()),
        # Short, so tests see keepalives and re-reads without waiting the production intervals.
        "PANEL_STREAM_KEEPALIVE_S": "1",
        "PANEL_WATCH_RESYNC_S": "5",
        "PANEL_WAIT_RECHECK_S": "5",
        "PYTHONUNBUFFERED": "1",
        "LOG_LEVEL": "WARNING",
    }
    env.pop("PYTEST_CURRENT_TEST", None)
    process = start_web(port, env, log_path)
    server = LiveWeb(process, port, log_path)
    try:
        _wait_until_it_answers(server)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _wait_until_it_answers(server: LiveWeb) -> None:
    import httpx

    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"the server exited with {server.process.returncode}:\n{server.log_tail()}")
        try:
            httpx.get(f"{server.url}/api/v1/", timeout=2)
            return
        except httpx.TransportError:
            time.sleep(0.2)
    raise RuntimeError(f"the web server did not answer within {START_TIMEOUT_S} s:\n{server.log_tail()}")


def point_cli_at(live_web, user, monkeypatch, tmp_path) -> None:
    """The CLI in this process talks to the live web server as `user`, with a config dir of its own."""
    from panel.accounts.models import ApiToken

    monkeypatch.setenv("ASCEND_PANEL_URL", live_web.url)
    monkeypatch.setenv("ASCEND_PANEL_TOKEN", ApiToken.issue(user, "cli")[1])
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.delenv("ASCEND_PANEL_IDEMPOTENCY_KEY", raising=False)
