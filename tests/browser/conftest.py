"""Browser tier: a real panel (web server, panel worker + beat, one agent per simulated host) driven by
Debian's chromium through Playwright's sync API.

Fixtures other browser tests reuse:

- `live_panel` (session): the running panel. `.url` is its base URL ("http://127.0.0.1:PORT"),
  `.sim_root("sim-a2")` the simulated host's tree (give it to `python -m workers.sim fault --root ...`),
  `.env` the environment the servers run with (use it to run `manage.py` or `python -m workers.sim`),
  `.manage(*args)` / `.sim(*args)` run those with that environment, `.wait_for_node_online(name)`,
  `.api(user)` an httpx client authenticated as alice / bob / charlie, and `.log_tail(name)` the
  last lines a server printed (its logs are in `.data_dir / "logs"`).
  Users: alice (admin), bob (operator), charlie (viewer), password "<name>-password".
  Nodes: SIM_NODES below, each with an agent sampling metrics every second (heartbeat every second).
  The database is a fresh SQLite file in a temporary PANEL_DATA_DIR (DATABASE_URL is removed for the
  servers, so CI's PostgreSQL is never touched); Redis is tests/conftest.py's `redis_url` with the
  database index BROWSER_REDIS_DB, so Celery queues and channel groups stay apart from other tiers.
- `browser` (session): chromium from /usr/bin/chromium (never `playwright install`); the whole tier is
  skipped when it is missing.
- `staged_model` (session): a tiny Qwen2 model (MODEL_NAME) on sim-a2's disk, registered and inspected through
  the models API; deployment tests deploy it. `wait_until(check, timeout, what)` polls without a browser.
- `panel_page` (factory): `panel_page(user="alice", locale="en")` returns a Page that has logged in
  through the real login form and sits on the dashboard. locale is "en" or "zh-hans".

Every browser test is marked `pytest.mark.browser` (done here for everything in this folder).

Run: `make test-browser` (or `.venv/bin/pytest tests/browser -q`). The panel starts once per session
(about 15 s); when a server dies, the failure carries the end of its log. More fleet than the sim hosts:
tests/browser/fake_fleet.py sends agent-shaped metric batches for N nodes (see test_dashboard.py).
"""

import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
import redis

from panel import web
from panel.run import (
    DEMO_MODEL_PATH,
    Supervisor,
    _die_with_parent,
    free_port,
    sim_agent_env,
    sim_credentials,
    stop_sim_engines,
    wait_for_port,
)
from tests.deployment_helpers import free_port_pair

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
SIM_NODES = (("sim-a2", "atlas-800i-a2"),)
USERS = (("alice", "admin"), ("bob", "operator"), ("charlie", "viewer"))
BROWSER_REDIS_DB = 11
LOCALE_OF = {"en": "en-US", "zh-hans": "zh-CN"}
MODEL_NAME = "tiny-qwen-browser"
MODEL_PATH = "/data/models/tiny-qwen-browser"  # a path on the node, under the sim host's root

# Run in the servers' environment by `manage.py shell -c`: role groups and the three test users.
CREATE_USERS = f"""
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from panel.accounts.bootstrap import ensure_role_groups
ensure_role_groups()
for name, role in {USERS!r}:
    user, _ = get_user_model().objects.get_or_create(username=name)
    user.set_password(name + "-password")
    user.save()
    user.groups.set([Group.objects.get(name=role)])
"""


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.browser)


def _redis_for_browser_tier(url: str) -> str:
    """The same server, its own database index: the live panel's queues never meet another tier's, nor
    those of the live panel another xdist worker of the fast tier started (the CLI modules each use one)."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    database = BROWSER_REDIS_DB + worker
    if database > 15:
        raise RuntimeError(
            f"xdist worker {worker} has no Redis database left for its live panel: use -n 4 or less"
        )
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", parts.query, parts.fragment))


class _LoggingSupervisor(Supervisor):
    """panel.run's Supervisor, with each child's output in its own log file instead of pytest's."""

    def __init__(self, env: dict, log_dir: Path):
        super().__init__(env)
        self.log_dir = log_dir
        log_dir.mkdir(parents=True, exist_ok=True)

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name.replace(' ', '-')}.log"

    def start(self, name: str, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        with self.log_path(name).open("ab") as log:
            process = subprocess.Popen(
                argv,
                cwd=REPO,
                env={**self.env, **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
        self.children.append((name, process))
        return process

    def run_once(self, argv: list[str]) -> str:
        done = subprocess.run(argv, cwd=REPO, env=self.env, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv[1:])} failed with exit code {done.returncode}:\n{done.stdout}\n{done.stderr}"
            )
        return done.stdout


class LivePanel:
    def __init__(self, supervisor: _LoggingSupervisor, url: str, data_dir: Path):
        self._supervisor = supervisor
        self.url = url
        self.data_dir = data_dir
        self.env = supervisor.env

    def sim_root(self, name: str = "sim-a2") -> Path:
        root = self.data_dir / "sim" / name
        if not root.is_dir():
            raise KeyError(f"no simulated host {name!r}; the live panel has {[n for n, _ in SIM_NODES]}")
        return root

    def manage(self, *args: str) -> str:
        return self._supervisor.run_once([PYTHON, "manage.py", *args])

    def sim(self, *args: str) -> str:
        return self._supervisor.run_once([PYTHON, "-m", "workers.sim", *args])

    def start(self, name: str, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        """Run one more child for the rest of the session (stopped with the panel)."""
        return self._supervisor.start(name, argv, env)

    def api(self, user: str = "alice") -> httpx.Client:
        return httpx.Client(base_url=self.url, auth=(user, f"{user}-password"), timeout=10)

    def node(self, name: str) -> dict:
        with self.api() as client:
            found = client.get("/api/v1/nodes/", params={"name": name}).raise_for_status().json()["results"]
        if not found:
            raise KeyError(f"node {name!r} is not in the panel")
        return found[0]

    def mark_npus_healthy(self, name: str) -> None:
        """An admin marks every NPU of `name` that a test's sim fault took out of service healthy again: a
        failed NPU stays failed until an admin says otherwise (docs/npu-health.md), and the tests after this
        one count on the node's NPUs."""
        node = self.node(name)
        with self.api("alice") as client:
            for npu in node["npus"]:
                if npu.get("health_state", "ok") != "ok":
                    which = f"{npu['npu_id']}/{npu['chip_id']}"
                    body = {"npu": which, "state": "ok", "note": "test fault over"}
                    client.post(f"/api/v1/nodes/{node['id']}/npu-health/", json=body).raise_for_status()

    def wait_for_node_online(self, name: str, timeout: float = 60) -> dict:
        """The node once online and inventoried: its NPU rows come with its first inventory, which the agent's
        first words start, and a deployment planned before that finds none (seen under CI's load)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                node = self.node(name)
            except httpx.TransportError:  # a web server still starting on a busy machine: ask again
                node = {"status": "unanswered"}
            if node["status"] == "online" and node.get("inventoried_at"):
                return node
            self.check_children()
            time.sleep(0.25)
        agent_log = self.log_tail(f"agent {name}")
        raise TimeoutError(
            f"node {name} was not online and inventoried within {timeout:.0f} s; agent log:\n{agent_log}"
        )

    def check_children(self) -> None:
        exited = self._supervisor.watch()
        if exited:
            raise RuntimeError(f"{exited} exited; its log ends:\n{self.log_tail(exited)}")

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self._supervisor.log_path(name)
        if not path.exists():
            return f"(no log at {path})"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _prepare(supervisor: _LoggingSupervisor, data_dir: Path) -> None:
    """A fresh database with the test users, the simulated hosts and their nodes, each host with the tiny
    chat model `make run` gives it (registered as tiny-chat; inspected once the agents run)."""
    supervisor.run_once([PYTHON, "manage.py", "migrate", "--no-input", "-v", "0"])
    supervisor.run_once([PYTHON, "manage.py", "shell", "-c", CREATE_USERS])
    for name, profile in SIM_NODES:
        root = str(data_dir / "sim" / name)
        supervisor.run_once(
            [PYTHON, "-m", "workers.sim", "create", "--profile", profile, "--root", root, "--node-name", name]
            + ["--tiny-chat-model"]
        )
    nodes = [name for name, _ in SIM_NODES]
    supervisor.run_once([PYTHON, "manage.py", "ensure_demo_nodes", *nodes])
    supervisor.run_once(sim_credentials(nodes, data_dir / "sim"))
    supervisor.run_once([PYTHON, "manage.py", "ensure_demo_models", "--path", DEMO_MODEL_PATH, *nodes])


def _start_servers(supervisor: _LoggingSupervisor, data_dir: Path, port: int) -> None:
    """The same processes `make run` starts (panel/run.py), each logging to its own file."""
    celery = [PYTHON, "-m", "celery", "-A", "panel.celery"]
    supervisor.start("web", web.argv("127.0.0.1", port, PYTHON))
    supervisor.start(
        "panel-worker",
        [
            *celery,
            *("worker", "-Q", "panel", "--pool", "threads", "--concurrency", "4"),
            *("--hostname", "panel@browser-tier", "--without-mingle", "--without-gossip"),
        ],
    )
    supervisor.start("beat", [*celery, "beat", "--schedule", str(data_dir / "celerybeat-schedule")])
    for name, _profile in SIM_NODES:
        agent_env = sim_agent_env(supervisor.env, name, data_dir / "sim" / name)
        supervisor.start(f"agent {name}", [PYTHON, "-m", "workers.agent"], env=agent_env)


@pytest.fixture(scope="session")
def live_panel(redis_url, tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("live-panel")
    env = dict(
        os.environ,
        PANEL_MODE="run",
        PANEL_DATA_DIR=str(data_dir),
        REDIS_URL=_redis_for_browser_tier(redis_url),
        PYTHONUNBUFFERED="1",
        DJANGO_SETTINGS_MODULE="panel.settings",
        ASCEND_PANEL_METRICS_S="1",
        ASCEND_PANEL_HEARTBEAT_S="1",
        PANEL_HEARTBEAT_INTERVAL="1",
        LOG_LEVEL="WARNING",
        # Engines away from 18000, where a `make run` or another session's engine may be listening.
        PANEL_DEPLOY_BASE_PORT=str(free_port_pair()),
    )
    for inherited in ("DATABASE_URL", "CELERY_BROKER_URL", "PYTEST_CURRENT_TEST"):
        env.pop(inherited, None)
    # The panel's database is new each session (SQLite in data_dir); its Redis database must be too: what an
    # earlier session left there (open alert keys of nodes with the same names, queued tasks) would be taken
    # for this panel's own, e.g. alerts never raised because Redis said they were open already.
    redis.Redis.from_url(env["REDIS_URL"]).flushdb()
    supervisor = _LoggingSupervisor(env, data_dir / "logs")
    port = free_port()
    panel = LivePanel(supervisor, f"http://127.0.0.1:{port}", data_dir)
    try:
        _prepare(supervisor, data_dir)
        _start_servers(supervisor, data_dir, port)
        wait_for_port(port, timeout=60)
        for name, _profile in SIM_NODES:
            panel.wait_for_node_online(name)
        yield panel
    finally:
        supervisor.stop()
        # As `make run` does: the engines the agents started run detached and would outlive the session.
        stop_sim_engines([data_dir / "sim" / name for name, _ in SIM_NODES])


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"browser tier skipped: {CHROMIUM} is missing (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def panel_page(live_panel, browser):
    """`panel_page(user="alice", locale="en")`: a Page logged in through the login form, on the dashboard.
    Tests' own string predicates (wait_for_function) run through eval in the page, which the panel's
    Content-Security-Policy refuses: contexts bypass it unless `bypass_csp=False`
    (tests/browser/test_content_security_policy.py opens the pages under it)."""
    contexts = []

    def open_page(user: str = "alice", locale: str = "en", viewport=None, bypass_csp: bool = True):
        if locale not in LOCALE_OF:
            raise ValueError(f"locale must be one of {sorted(LOCALE_OF)}, not {locale!r}")
        context = browser.new_context(
            base_url=live_panel.url,
            locale=LOCALE_OF[locale],
            viewport=viewport or {"width": 1440, "height": 900},
            bypass_csp=bypass_csp,
        )
        contexts.append(context)
        # Django's LocaleMiddleware reads this cookie before Accept-Language: the page renders in `locale`.
        context.add_cookies([{"name": "django_language", "value": locale, "url": live_panel.url}])
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.goto("/accounts/login/")
        page.fill("#id_username", user)
        page.fill("#id_password", f"{user}-password")
        page.click("form.login-form button[type=submit]")
        page.wait_for_url(lambda url: "/accounts/login/" not in url)
        return page

    yield open_page
    for context in contexts:
        context.close()


def wait_until(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.25)
    raise TimeoutError(f"{what} within {timeout:.0f} s")


def delete_deployments(live_panel, names, timeout: float = 90) -> None:
    """Delete the deployments named, as alice, and wait until each is gone (their engines stopped)."""
    with live_panel.api("alice") as api:
        for name in names:
            api.delete(f"/api/v1/deployments/{name}/")
        for name in names:
            wait_until(
                lambda name=name: api.get(f"/api/v1/deployments/{name}/").status_code == 404,
                timeout,
                f"{name} gone",
            )


@pytest.fixture(scope="session")
def staged_model(live_panel):
    """A tiny Qwen2 model on the sim host's disk, registered (and inspected on the node) through the API."""
    node = SIM_NODES[0][0]
    folder = live_panel.sim_root(node) / MODEL_PATH.lstrip("/")
    subprocess.run(
        [PYTHON, "-m", "workers.models.tiny", str(folder), "--arch", "qwen2"],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=120,
    )
    live_panel.wait_for_node_online(node)
    with live_panel.api("alice") as client:
        wait_until(
            lambda: client.get(f"/api/v1/nodes/{live_panel.node(node)['id']}/").json().get("npus"),
            60,
            f"{node} has no NPUs after its first inventory",
        )
        client.post(
            "/api/v1/models/",
            json={"source": "local", "node": node, "path": MODEL_PATH, "name": MODEL_NAME},
        ).raise_for_status()

        def ready():
            answer = client.get(f"/api/v1/models/{MODEL_NAME}/")
            model = answer.json() if answer.status_code == 200 else None
            return model if model and model["facts"] and any(a["ready"] for a in model["artifacts"]) else None

        return wait_until(ready, 60, f"{MODEL_NAME} was not inspected on {node}")


@pytest.fixture
def stopped_deployment(staged_model, live_panel):
    """`stopped_deployment(name)`: a stopped deployment of the tiny model on one NPU, deleted afterwards."""
    made = []

    def make(name: str) -> str:
        spec = {
            "model": MODEL_NAME,
            "path": MODEL_PATH,
            "placement": {"node": "sim-a2", "npus": 1},
            "engine": {"max_model_len": 1024},
            "state": "stopped",
        }
        with live_panel.api("bob") as api:
            answer = api.put(f"/api/v1/deployments/{name}/", json=spec)
            assert answer.status_code == 201, answer.text
        made.append(name)
        return name

    yield make
    delete_deployments(live_panel, made)


MOONCAKE_NODE = "sim-a2"
# What an install of the vllm-ascend stack records for the node (panel/provisioning NodeStack.record): the
# sim host's serving venv is a stand-in without package metadata, so its inventory finds no version, and the
# launch matrix names Mooncake only for a known vllm-ascend from 0.11.0rc1.
RECORD_STACK = """
from panel.nodes.models import Node
from panel.provisioning.models import NodeStack, StackStatus
stack, made = NodeStack.objects.get_or_create(node=Node.objects.get(name={node!r}))
print("made" if made else "kept:" + stack.status)
stack.status = StackStatus.INSTALLED
stack.record = {{**stack.record, "vllm_ascend": "0.13.0", "vllm": "0.13.0"}}
stack.save()
"""
FORGET_STACK = """
from panel.provisioning.models import NodeStack
stack = NodeStack.objects.get(node__name={node!r})
if {made!r}:
    stack.delete()
else:
    stack.status = {status!r}
    stack.record = {{k: v for k, v in stack.record.items() if k not in ("vllm_ascend", "vllm")}}
    stack.save()
"""


@pytest.fixture
def mooncake_stack(live_panel, staged_model):
    """The sim host recorded as an install of vllm-ascend 0.13.0 would (Mooncake offered), undone after."""
    said = live_panel.manage("shell", "-c", RECORD_STACK.format(node=MOONCAKE_NODE)).strip().splitlines()[-1]
    yield
    made, _sep, status = said.partition(":")
    live_panel.manage(
        "shell", "-c", FORGET_STACK.format(node=MOONCAKE_NODE, made=made == "made", status=status)
    )


@pytest.fixture
def cleanup(live_panel):
    """A list the test adds deployment names to; they are deleted afterwards."""
    names = []
    yield names
    delete_deployments(live_panel, names)
