"""The agent's configuration: from its environment (workers.agent documents the variables), or from an SSH
node's task for the central agent. Apart from workers.agent so that task modules can read it without
importing the agent's entry point (which imports them)."""

import os
from dataclasses import dataclass

from workers.hosts import LocalRunner
from workers.remote import SshTarget, ssh_runner


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
        checked = SshTarget.model_validate(target)
        return cls(
            node_name=checked.node,
            host_root=checked.host_root,
            ascend_root=checked.ascend_root,
            ssh_target=checked.model_dump(),
        )

    def runner(self):
        """The Runner for this node's host: this machine, or the node over SSH."""
        if self.ssh_target is None:
            return LocalRunner()
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
