"""The agent process: a Celery worker on queue node.<name> plus a heartbeat (and metrics) thread.

`python -m workers.agent --central` is the central agent instead: it serves queue ssh-runner, running the
tasks of SSH nodes (nodes without an agent) over SSH; it needs PANEL_SECRETS_KEY (see workers.sealing).

Started on each Ascend host as `python -m workers.agent` (systemd unit in deploy/), configured by
environment variables only:
  ASCEND_PANEL_NODE_NAME   the node's name in the panel (queue node.<name>)
  CELERY_BROKER_URL        the broker, as the join answer gave it: amqp(s)://node.<name>:…@host/vhost, this
                           node's own RabbitMQ user (make run's embedded Redis on a single machine)
  ASCEND_PANEL_BROKER_CA_FILE
                           the broker's CA certificate pinned at join (amqps://)
  ASCEND_PANEL_AGENT_KEY   this node's credential (the join command writes it; or ..._AGENT_KEY_FILE):
                           it signs what the agent sends and verifies the panel's tasks (workers.identity)
  ASCEND_PANEL_STATE_DIR   the agent's own state: operation leases, the event spool (default
                           /var/lib/ascend-panel under the host root)
  ASCEND_PANEL_MODELS_ROOT the only folder model tasks write to or delete from (default /data/models): the
                           agent's own policy, whatever a message says
  ASCEND_PANEL_HOST_ROOT   where /etc, /proc and /sys are read from (default /; a sim host sets its tree)
  ASCEND_PANEL_ASCEND_ROOT Ascend install root (default /usr/local/Ascend)
  ASCEND_PANEL_HEARTBEAT_S heartbeat interval in seconds (default 5)
  ASCEND_PANEL_METRICS_S   NPU/host sampling interval in seconds (default 1; 0 turns sampling off)
  ASCEND_PANEL_SSH_KEY     private key this node's model copies log in to other nodes with (default: the
                           agent user's ~/.ssh keys)
  ASCEND_PANEL_COPY_BWLIMIT_KIB_S
                           model copies from this node send at most this many KiB/s (default 0: no limit),
                           so a copy leaves room on the network the engines serve over
  ASCEND_PANEL_CONTAINER_* how engine containers run here (engine, extra mounts, passed variables, cache,
                           shm size): see workers.containers.hostconf
"""

import logging
import os
import sys
import threading
from dataclasses import dataclass

from workers import __version__

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AgentConfig:
    node_name: str
    host_root: str = "/"
    ascend_root: str = "/usr/local/Ascend"
    heartbeat_s: float = 5.0
    metrics_s: float = 1.0
    ssh_key: str = ""
    copy_bwlimit_kib_s: int = 0  # model copies from this node: rsync's --bwlimit, 0 for none
    models_root: str = "/data/models"
    # Set for tasks the central agent runs over SSH for a node without an agent (workers.remote.SshTarget).
    ssh_target: dict | None = None

    @classmethod
    def for_target(cls, target: dict) -> "AgentConfig":
        """The config of an SSH node's task: its name and file roots come from the task, not the process."""
        from workers.remote import SshTarget

        checked = SshTarget.model_validate(target)
        return cls(
            node_name=checked.node,
            host_root=checked.host_root,
            ascend_root=checked.ascend_root,
            ssh_target=checked.model_dump(),
        )

    def runner(self):
        """The Runner for this node's host: this machine, or the node over SSH."""
        from workers.hosts import LocalRunner

        if self.ssh_target is None:
            return LocalRunner()
        from workers.remote import SshTarget, ssh_runner

        return ssh_runner(SshTarget.model_validate(self.ssh_target))

    @classmethod
    def from_env(cls) -> "AgentConfig":
        name = os.environ.get("ASCEND_PANEL_NODE_NAME", "").strip()
        if not name:
            raise SystemExit(
                "ASCEND_PANEL_NODE_NAME is not set: give this agent the node name it has in the panel."
            )
        return cls(
            node_name=name,
            host_root=os.environ.get("ASCEND_PANEL_HOST_ROOT", "/"),
            ascend_root=os.environ.get("ASCEND_PANEL_ASCEND_ROOT", "/usr/local/Ascend"),
            heartbeat_s=float(os.environ.get("ASCEND_PANEL_HEARTBEAT_S", "5")),
            metrics_s=float(os.environ.get("ASCEND_PANEL_METRICS_S", "1")),
            models_root=os.environ.get("ASCEND_PANEL_MODELS_ROOT", "/data/models"),
            ssh_key=os.environ.get("ASCEND_PANEL_SSH_KEY", ""),
            copy_bwlimit_kib_s=_whole_number("ASCEND_PANEL_COPY_BWLIMIT_KIB_S"),
        )


def _whole_number(name: str) -> int:
    value = os.environ.get(name, "").strip() or "0"
    if not value.isdigit():
        raise SystemExit(f"{name} must be a whole number (0 or more), not {value!r}.")
    return int(value)


def heartbeat_loop(config: AgentConfig, stop: threading.Event) -> None:
    from workers.contracts import Heartbeat, utcnow
    from workers.events import send_to_panel
    from workers.leases import finished_operations, running_operations
    from workers.task_names import HEARTBEAT

    while not stop.is_set():
        beat = Heartbeat(
            node=config.node_name,
            time=utcnow(),
            agent_version=__version__,
            interval_s=config.heartbeat_s,
            running=running_operations(),
            done=finished_operations(),
        )
        try:
            send_to_panel(HEARTBEAT, beat.model_dump(mode="json"))
        except Exception:  # the broker may be restarting; the next beat tries again
            log.exception("heartbeat not sent")
        stop.wait(config.heartbeat_s)


def start_background_threads(config: AgentConfig) -> threading.Event:
    from workers.events import publish
    from workers.spool import spool_for

    spool_for(publish)  # sends what an earlier run of the agent left in its spool
    stop = threading.Event()
    threading.Thread(target=heartbeat_loop, args=(config, stop), name="heartbeat", daemon=True).start()
    if config.metrics_s > 0:
        from workers.sampler import sampler_loop

        threading.Thread(target=sampler_loop, args=(config, stop), name="sampler", daemon=True).start()
    return stop


def main_central(argv: list[str]) -> None:
    """The central agent: runs SSH nodes' tasks (queue ssh-runner); sends no heartbeat of its own."""
    import workers.tasks  # noqa: F401  registers the agent tasks
    from workers.celery_app import app, configure_agent
    from workers.identity import CENTRAL_ENV
    from workers.sealing import fernet_for, key_material_from_env
    from workers.task_names import SSH_RUNNER_QUEUE

    fernet_for(key_material_from_env())  # refuse to start without the key that opens node secrets
    os.environ[CENTRAL_ENV] = "1"  # signs and verifies with the central key (workers.identity)
    configure_agent(app, SSH_RUNNER_QUEUE)
    app.worker_main(
        [
            "worker",
            "--pool",
            "threads",
            "--concurrency",
            os.environ.get("ASCEND_PANEL_AGENT_CONCURRENCY", "8"),
            "--queues",
            SSH_RUNNER_QUEUE,
            "--hostname",
            "central@%h",
            "--loglevel",
            os.environ.get("LOG_LEVEL", "INFO"),
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
            *argv,
        ]
    )


def main(argv: list[str] | None = None) -> None:
    from celery.signals import worker_ready, worker_shutdown

    import workers.tasks  # noqa: F401  registers the agent tasks
    from workers.celery_app import app, configure_agent
    from workers.task_names import node_queue

    argv = list(sys.argv[1:] if argv is None else argv)
    if "--central" in argv:
        argv.remove("--central")
        main_central(argv)
        return
    config = AgentConfig.from_env()
    from workers.identity import Untrusted, signing_key

    try:
        signing_key(config.node_name)
    except Untrusted as error:
        raise SystemExit(str(error)) from None
    threads = {}

    @worker_ready.connect(weak=False)
    def _start(**_):
        threads["stop"] = start_background_threads(config)

    @worker_shutdown.connect(weak=False)
    def _stop(**_):
        if "stop" in threads:
            threads["stop"].set()

    concurrency = os.environ.get("ASCEND_PANEL_AGENT_CONCURRENCY", "4")
    configure_agent(app, node_queue(config.node_name))
    app.worker_main(
        [
            "worker",
            "--pool",
            "threads",
            "--concurrency",
            concurrency,
            "--queues",
            node_queue(config.node_name),
            "--hostname",
            f"agent@{config.node_name}",
            "--loglevel",
            os.environ.get("LOG_LEVEL", "INFO"),
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
            *argv,
        ]
    )


if __name__ == "__main__":
    main()
