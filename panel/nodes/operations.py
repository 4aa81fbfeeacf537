"""Operations that act on a node."""

from django.utils.translation import gettext as _

from panel.core.choices import NodeTransport, OperationKind
from panel.operations.services import create_operation
from workers.task_names import AGENT_INSTALL_AGENT, AGENT_INVENTORY


def _check_reachable(node) -> None:
    from panel.nodes.lifecycle import NodeActionRefused

    if node.transport == NodeTransport.SSH and not node.ssh_host_key_fingerprint:
        raise NodeActionRefused(
            _("Confirm the host key fingerprint of %(node)s first; nothing runs on it before that.")
            % {"node": node.name}
        )


def start_inventory(node, user=None):
    _check_reachable(node)
    return create_operation(kind=OperationKind.INVENTORY, node=node, task_name=AGENT_INVENTORY, user=user)


def start_install_agent(node, *, panel_url: str, user=None):
    """Install the agent onto an SSH node through the central agent, which feeds the install script a fresh
    join token on stdin; the token travels sealed (only the central agent opens it) and never reaches a
    command line. The script trades it for the node's own credential."""
    from panel.core.secrets import encrypt
    from panel.nodes.agent_package import INSTALL_SCRIPT, agent_sdist_sha256
    from panel.nodes.join import issue_join_token
    from panel.nodes.lifecycle import NodeActionRefused

    if node.transport != NodeTransport.SSH:
        raise NodeActionRefused(
            _("%(node)s already runs an agent; reinstall it with the one-line command on the host.")
            % {"node": node.name}
        )
    _check_reachable(node)
    # The admin asked for the agent: its credential replaces whatever the node had (audited with the token).
    token = issue_join_token(node.name, user=user, rotate_credential=True)
    script_args = [
        "--panel",
        panel_url.rstrip("/"),
        "--node",
        node.name,
        "--package-sha256",
        agent_sdist_sha256(),
    ]
    return create_operation(
        kind=OperationKind.INSTALL,
        node=node,
        task_name=AGENT_INSTALL_AGENT,
        user=user,
        target="ascend-panel-agent",
        params={"component": "agent", "panel": panel_url},
        task_kwargs={
            "script": INSTALL_SCRIPT.read_text(),
            "script_args": script_args,
            "sealed_token": encrypt(token),
        },
    )
