"""What nodes tell the apps above them (docs/architecture.md: a lower app never imports a higher one).

A status change is sent inside the transaction that made it (sender: the Node class); receivers connect in
their own app's `AppConfig.ready()` and run right there, as the direct calls they replace did."""

from django.dispatch import Signal

# A heartbeat arrived from a node that was not online (panel.nodes.services.record_heartbeat). Kwargs: node.
node_online = Signal()

# A heartbeat arrived from a node that was never inventoried, and PANEL_INVENTORY_ON_FIRST_HEARTBEAT is on
# (panel.nodes.services.record_heartbeat). Kwargs: node.
node_not_inventoried = Signal()

# The offline sweep found a node that missed its heartbeats (panel.nodes.services.mark_silent_nodes_offline).
# Kwargs: node.
node_offline = Signal()

# An NPU's health state (Npu.health_state: ok | suspect | failed) changed, by the policy
# (panel.nodes.health.npu_health) or by an admin's override. Sent inside the transaction that made the change;
# a receiver that starts work (failover: exclude the replicas on it, re-place them) should do so on commit.
# Kwargs: npu (the Npu, saved), old, new (NpuHealthState values), reason (dict: "signal" — one of
# panel.nodes.health.npu_health.SIGNALS or "admin" —, "detail" text, "by" "policy" | a username).
npu_health_changed = Signal()
