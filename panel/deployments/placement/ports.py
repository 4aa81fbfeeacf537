"""Engine ports: which a deployment may take, counted per host, and moving a port the panel picked.

Ports are counted per host address, not per node: nodes that give the same address (the two sim hosts
both say 127.0.0.1; any loopback address is this machine) share one set of ports. A node without an
address is a host of its own. Each engine takes its port and the next one (the data-parallel RPC port).

What other processes hold is known only on the host: the agent refuses a launch on a port in use
(workers.engine.launch.ports) with a permanent failure. A port the panel picked is then moved to the next free
one and the engine started again (`move_after_refusal`); a port the user gave fails the deployment.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.conf import settings
from django.utils.translation import gettext as _

from panel.core.domain.choices import DesiredState
from panel.core.domain.errors import InvalidInput
from panel.deployments.models import Deployment
from panel.nodes.models import Node
from workers.engine.launch.kv_transfer import follow_port

LOOPBACK = ("127.0.0.1", "localhost", "::1")
THIS_MACHINE = "loopback"


def host_key(node: Node) -> str:
    """What identifies the host a node's engines listen on."""
    address = (node.address or "").strip().lower()
    if not address:
        return f"node:{node.pk}"
    if address in LOOPBACK or address.startswith("127."):
        return THIS_MACHINE
    return address


def _same_hosts(nodes: Iterable[Node]) -> list[Node]:
    """The nodes on the same hosts as `nodes` (themselves included)."""
    keys = {host_key(node) for node in nodes}
    return [node for node in Node.objects.all() if host_key(node) in keys]


def ports_in_use(nodes: Iterable[Node], excluding: Deployment | None = None) -> dict[int, Deployment]:
    """{port: deployment} for every port a live deployment holds on the hosts of `nodes`."""
    live = (
        Deployment.objects.filter(nodes__in=_same_hosts(nodes))
        .exclude(desired_state=DesiredState.DELETED)
        .distinct()
    )
    if excluding is not None:
        live = live.exclude(pk=excluding.pk)
    used: dict[int, Deployment] = {}
    for deployment in live:
        port = (deployment.spec or {}).get("port")
        if port:
            used.setdefault(int(port), deployment)
            used.setdefault(int(port) + 1, deployment)
    return used


def free_port(nodes: list[Node], replacing: Deployment | None = None, avoid: Iterable[int] = ()) -> int:
    """The port a deployment on `nodes` gets when none is given: the one it holds now (`replacing`) while
    that stays free, else the lowest pair from PANEL_DEPLOY_BASE_PORT no live deployment on those hosts
    uses and not in `avoid` (ports the host refused)."""
    used = set(ports_in_use(nodes, replacing)) | set(avoid)
    held = (replacing.spec or {}).get("port") if replacing is not None else None
    if held and int(held) not in used and int(held) + 1 not in used:
        return int(held)
    port = settings.PANEL_DEPLOY_BASE_PORT
    while port in used or port + 1 in used:
        port += 2
    return port


def choose(port: int | None, nodes: list[Node], replacing, port_pinned: bool | None) -> tuple[int, bool]:
    """(port, pinned) for a plan: the request's port, unless another deployment on the same host holds it
    (refused when the user gave it, moved when it was only kept), else a free one. `port_pinned` None:
    the port is the user's whenever there is one."""
    pinned = bool(port) if port_pinned is None else port_pinned
    if not port:
        return free_port(nodes, replacing), False
    holder = holder_of(port, nodes, replacing)
    if holder is not None and pinned:
        raise InvalidInput({"port": [clash_message(port, holder)]})
    if holder is not None:
        return free_port(nodes, replacing), False
    return port, pinned


def holder_of(port: int, nodes: list[Node], replacing: Deployment | None = None) -> Deployment | None:
    """The live deployment on the hosts of `nodes` whose ports `port` (or port + 1) would clash with."""
    used = ports_in_use(nodes, replacing)
    return used.get(port) or used.get(port + 1)


def clash_message(port: int, holder: Deployment) -> str:
    return _("Port {port} (or {next}) is used by the deployment {name} on the same host.").format(
        port=port, next=port + 1, name=holder.name
    )


def move_after_refusal(deployment: Deployment, refused: int) -> int | None:
    """The host refused `refused` (another process listens there): give the deployment a new port if the
    panel picked it, and return that port; None for a port the user gave (the launch fails for good)."""
    if (deployment.plan or {}).get("port_pinned"):
        return None
    # Kept with the plan (a launch resets the runtime): a second refusal must not move it back to the first.
    avoid = {*((deployment.plan or {}).get("refused_ports") or []), refused}
    port = free_port(list(deployment.nodes.all()), replacing=None, avoid=avoid)
    set_port(deployment, port)
    deployment.plan = {**(deployment.plan or {}), "refused_ports": sorted(avoid)}
    return port


def set_port(deployment: Deployment, port: int) -> None:
    """Give every node's launch the new port (and the head's RPC port beside it, a disaggregated engine's KV
    port after it). Saves nothing."""
    spec = dict(deployment.spec or {})
    spec["port"] = port
    parts = []
    for part in spec.get("parts") or []:
        launch = {**part.get("launch", {}), "port": port}
        if launch.get("multi_node"):
            launch["multi_node"] = {**launch["multi_node"], "data_parallel_rpc_port": port + 1}
        if launch.get("kv_transfer_config"):
            launch["kv_transfer_config"], launch["env"] = follow_port(
                launch["kv_transfer_config"], launch.get("env") or {}, port
            )
        parts.append({**part, "launch": launch})
    spec["parts"] = parts
    deployment.spec = spec
