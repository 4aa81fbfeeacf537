"""Domain events monitoring defines for the apps above it (docs/architecture.md)."""

from django.dispatch import Signal

# A deployment's observed state may have changed (deployments sends it after the change commits).
# kwargs: snapshot, a dict: name, observed_state, desired_state, reason, failed_restarts, replicas_wanted,
# replicas_serving (a primary's serving replicas, itself included; None on a replica), rollout_failed
# (the primary's last rollout failed) and gone (the deployment was deleted).
deployment_observed = Signal()

# A serving decision was recorded or settled (docs/serving-plane.md §2; deployments sends it after the change
# commits, panel/deployments/decisions.py). kwargs: decision, a dict as the events API gives it: id, name (the
# deployment), replica, time, kind, role, actor, username, figures, reason (English), reason_parts, outcome,
# outcome_reason, outcome_parts, settled; and settled, a bool (False when it was just recorded).
deployment_event_recorded = Signal()
