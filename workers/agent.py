"""The agent process: a Celery worker on queue node.<name> plus a heartbeat (and metrics) thread.

`python -m workers.agent --central` is the central agent instead: it serves queue ssh-runner, running the
tasks of SSH nodes (nodes without an agent) over SSH. It holds the central key (ASCEND_PANEL_AGENT_KEY_FILE,
written by `manage.py agent_credential --central`) and its own broker URL (`--broker`), never the panel's key
material: it refuses to start when given PANEL_SECRETS_KEY or SECRET_KEY (workers.identity).

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

import workers.tasks  # noqa: F401  registers the agent tasks
from workers import __version__, metrics_inbox
from workers.agent_config import AgentConfig
from workers.asking import AnswersInline
from workers.celery_app import app, configure_agent
from workers.contracts import Heartbeat, utcnow
from workers.events import publish_unsealed
from workers.identity import CENTRAL, CENTRAL_ENV, Untrusted, signing_key
from workers.leases import finished_operations, running_operations
from workers.sampler import sampler_loop
from workers.sealing import panel_key_material_in
from workers.spool import spool_for
from workers.task_names import SSH_RUNNER_QUEUE, node_queue

log = logging.getLogger(__name__)


def heartbeat_loop(config: AgentConfig, stop: threading.Event) -> None:
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
            metrics_inbox.push_heartbeat(beat)
        except Exception:  # the broker may be restarting; the next beat tries again
            log.exception("heartbeat not sent")
        stop.wait(config.heartbeat_s)


def start_background_threads(config: AgentConfig) -> threading.Event:
    spool_for(publish_unsealed)  # sends what an earlier run of the agent left in its spool
    stop = threading.Event()
    threading.Thread(target=heartbeat_loop, args=(config, stop), name="heartbeat", daemon=True).start()
    if config.metrics_s > 0:
        threading.Thread(target=sampler_loop, args=(config, stop), name="sampler", daemon=True).start()
    return stop


def configure(queue_name: str) -> None:
    """The worker serves `queue_name` as an agent, and handles the panel's answers to its asks as they
    arrive, beside its pool (workers.asking.AnswersInline)."""
    configure_agent(app, queue_name)
    if AnswersInline not in app.steps["consumer"]:
        app.steps["consumer"].add(AnswersInline)


def main_central(argv: list[str]) -> None:
    """The central agent: runs SSH nodes' tasks (queue ssh-runner); sends no heartbeat of its own."""
    check_central_environment()
    os.environ[CENTRAL_ENV] = "1"  # signs and verifies with the central key (workers.identity)
    try:
        signing_key(CENTRAL)
    except Untrusted as error:
        raise SystemExit(str(error)) from None
    configure(SSH_RUNNER_QUEUE)
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


def check_central_environment(environ=os.environ) -> None:
    """Refuse to run beside the panel's key material. Deriving the central key from it would still work,
    but a host holding it could derive every node's key and the panel's: the point of the central key is
    that this host does not hold it, so the admin is told what to set instead."""
    found = panel_key_material_in(environ)
    if found:
        raise SystemExit(
            f"the central agent was given the panel's key material ({', '.join(found)}): remove it from its "
            "environment. The central agent holds a key of its own: on the panel run `manage.py "
            "agent_credential --central --broker --dir DIR` and give the central agent "
            "ASCEND_PANEL_AGENT_KEY_FILE=DIR/central.key and CELERY_BROKER_URL from DIR/central.broker."
        )


def main(argv: list[str] | None = None) -> None:
    from celery.signals import worker_ready, worker_shutdown

    argv = list(sys.argv[1:] if argv is None else argv)
    if "--central" in argv:
        argv.remove("--central")
        main_central(argv)
        return
    config = AgentConfig.from_env()
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
    configure(node_queue(config.node_name))
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
