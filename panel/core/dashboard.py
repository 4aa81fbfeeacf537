"""The dashboard's first paint: fleet figures and NPU cards from the last inventory, before any live frame.

Live frames (websocket groups `fleet` and `node.<name>`) then replace these figures in the browser; the
labels go to the page as JSON so static/js/dashboard.js shows the same words the server renders.
"""

from dataclasses import dataclass, field

from django.utils.translation import gettext as _

from panel.core.choices import COLOUR_OFFLINE, NodeStatus, NpuHealth
from panel.nodes.models import Node, Npu


@dataclass
class NodeTile:
    node: Node
    status: str
    colour: str
    npus: list[Npu] = field(default_factory=list)
    multi_chip: bool = False

    @property
    def status_label(self) -> str:
        return NodeStatus(self.status).label

    @property
    def device_memory_total_mb(self) -> int:
        return sum(npu.device_memory_mb or 0 for npu in self.npus)


def npu_colour(health: str, node_status: str) -> str:
    """An NPU of a node that is not online is grey whatever its last health said: nothing is known now."""
    if node_status != NodeStatus.ONLINE:
        return COLOUR_OFFLINE
    return NpuHealth.colour(health)


def node_tiles(user) -> list[NodeTile]:
    tiles = []
    for node in Node.objects.visible_to(user).prefetch_related("npus__deployments"):
        status = node.effective_status
        npus = list(node.npus.all())
        for npu in npus:
            npu.colour = npu_colour(npu.health, status)
            npu.holder = ", ".join(deployment.name for deployment in npu.deployments.all())
        chips_per_npu = {npu.npu_id: 0 for npu in npus}
        for npu in npus:
            chips_per_npu[npu.npu_id] += 1
        tiles.append(
            NodeTile(
                node=node,
                status=status,
                colour=NodeStatus.colour(status),
                npus=npus,
                multi_chip=any(count > 1 for count in chips_per_npu.values()),
            )
        )
    return tiles


def fleet_totals(tiles: list[NodeTile]) -> dict:
    return {
        "nodes": len(tiles),
        "online": sum(1 for tile in tiles if tile.status == NodeStatus.ONLINE),
        "npus": sum(len(tile.npus) for tile in tiles),
        "memory_total_mb": sum(tile.device_memory_total_mb for tile in tiles),
    }


def page_labels() -> dict:
    """Words dashboard.js writes into the page, in the viewer's language."""
    return {
        "health": {value: str(label) for value, label in NpuHealth.choices},
        "node_status": {value: str(label) for value, label in NodeStatus.choices},
        "colours": {
            "health": NpuHealth.COLOURS,
            "node_status": NodeStatus.COLOURS,
        },
        "hbm": _("HBM"),
        "ddr": _("DDR"),
        "npu": _("NPU"),
        "live": _("Live"),
        "connecting": _("Connecting…"),
        "unhealthy": _("%(count)s unhealthy"),
        "health_label": _("Health"),
        "chip_label": _("Chip"),
        "deployment_label": _("Deployment"),
        "processes_label": _("Processes"),
        "reconnecting": _("Reconnecting…"),
        "stale": _("No data for %(seconds)s s"),
        "no_history": _("History is not available yet: %(reason)s"),
        "loading": _("Loading…"),
        "chart_util": _("AI Core utilisation"),
        "chart_hbm": _("HBM used"),
        "chart_power": _("Power"),
        "chart_temp": _("Temperature"),
    }
