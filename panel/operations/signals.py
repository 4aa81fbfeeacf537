"""What operations tell the apps above them (docs/architecture.md: a lower app never imports a higher one).

Both are sent inside the transaction that stores the change, with the operation's row locked; receivers
connect in their own app's `AppConfig.ready()`, pick the kinds they own and run right there, as the direct
calls they replace did. sender is the Operation class."""

from django.dispatch import Signal

# An operation became terminal: ended by its agent, or marked lost (panel.operations.services.mark_lost).
# Kwargs: operation. Failed and cancelled ones too; a receiver that wants only successes checks the status.
operation_ended = Signal()

# Agent events of the operation's current attempt were stored. Kwargs: operation, events (the new
# OperationEvent rows, in order), failed (this batch ended the operation failed).
events_stored = Signal()
