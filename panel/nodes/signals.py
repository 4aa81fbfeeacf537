"""What nodes tell the apps above them (docs/architecture.md: a lower app never imports a higher one).

Sent inside the transaction that changed the node's status; receivers connect in their own app's
`AppConfig.ready()` and run right there, as the direct calls they replace did. sender is the Node class,
kwargs: node."""

from django.dispatch import Signal

# A heartbeat arrived from a node that was not online (panel.nodes.services.record_heartbeat).
node_online = Signal()

# The offline sweep found a node that missed its heartbeats (panel.nodes.services.mark_silent_nodes_offline).
node_offline = Signal()
