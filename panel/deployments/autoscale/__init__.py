"""Autoscaling: the spec's `autoscale:` (config), what it decides from the engines' figures (policy), and
the leader's step in the reconcile tick (decider). docs/serving-plane.md §2, §3, §5."""
