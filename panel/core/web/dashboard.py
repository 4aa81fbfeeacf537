"""The dashboard's first paint: the fleet summary (panel.monitoring.metrics.fleet) and, for one page of nodes,
their
NPU cards from the last inventory, before any live frame.

The browser then subscribes to the fleet summary and to the `node.<name>` groups of the nodes on its page
only: what a viewer receives grows with what it shows, not with the fleet. The labels go to the page as
JSON so static/js/dashboard.js shows the same words the server renders.
"""

import logging
from dataclasses import dataclass, field

import redis
from django.utils.translation import gettext as _

from panel.core.domain.choices import COLOUR_OFFLINE, NodeStatus, NpuHealth
from panel.monitoring.metrics.fleet import fleet_summary
from panel.monitoring.models import Alert
from panel.nodes.models import Node, Npu

log = logging.getLogger(__name__)


@dataclass
class NodeTile:
    node: Node
    status: str
    colour: str
    npus: list[Npu] = field(default_factory=list)
    multi_chip: bool = False
    alert_ids: list[int] = field(default_factory=list)  # open alerts; the page counts them live

    @property
    def status_label(self) -> str:
        return str(NodeStatus(self.status).label)

    @property
    def device_memory_total_mb(self) -> int:
        return sum(npu.device_memory_mb or 0 for npu in self.npus)


def npu_colour(health: str, node_status: str) -> str:
    """An NPU of a node that is not online is grey whatever its last health said: nothing is known now."""
    if node_status != NodeStatus.ONLINE:
        return COLOUR_OFFLINE
    return NpuHealth.colour(health)


def node_tiles(nodes: list[Node]) -> list[NodeTile]:
    """Tiles of the nodes on one page (their NPUs and the deployments holding them prefetched)."""
    open_alerts: dict[int, list[int]] = {}
    rows = Alert.objects.open().filter(node__in=[node.pk for node in nodes]).order_by("pk")
    for node_id, alert_id in rows.values_list("node_id", "pk"):
        open_alerts.setdefault(node_id, []).append(alert_id)
    tiles = []
    for node in nodes:
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
                alert_ids=open_alerts.get(node.pk, []),
            )
        )
    return tiles


def first_summary() -> dict:
    """The fleet summary for the first paint. Without the panel's Redis the live figures wait for the first
    frame; the counts come from the database either way."""
    try:
        return fleet_summary()
    except redis.RedisError:
        log.warning("live figures unavailable for the dashboard's first paint", exc_info=True)
        return fleet_summary(live=False)


def card_texts() -> dict:
    """The words of an NPU card (templates/core/npu_card.html), translated once for all the page's cards."""
    no_reading = _("No reading yet: the node's agent has not sent a sample of this NPU.")
    return {
        "npu": _("NPU"),
        "no_reading": no_reading,
        "util_title": _("AI Core utilisation"),
        "ai_core": _("AI Core"),
        "hbm": _("HBM"),
        "ddr": _("DDR"),
        "power": _("Power"),
        "temperature": _("Temperature"),
        "no_power_310p": _(
            "This chip does not report its power: npu-smi shows none for 310P chips (Atlas 300I Pro / Duo), "
            "whose card MCU measures it for the whole card."
        ),
        "holder": _("Deployment on this NPU"),
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
        "no_chip_name": _("Not inventoried"),
        "node_states": _(
            "Nodes: %(online)s online · %(offline)s offline · %(unknown)s unknown · %(cordoned)s cordoned"
        ),
    }
