"""What the fabric check tells the apps above it (docs/architecture.md: a lower app never imports a higher
one); receivers connect in their own app's `AppConfig.ready()`."""

from django.dispatch import Signal

# A check started for a deployment's launch (panel.fabric.services.gate_launch) has its verdict, inside the
# transaction that stored it. sender: the FabricCheck class; kwargs: check.
fabric_check_finished = Signal()
