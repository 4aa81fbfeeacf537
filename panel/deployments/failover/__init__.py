"""Failover on the beat leader (docs/serving-plane.md §3, §6): when to move replicas off failed NPUs
(policy.py, pure) and the move itself through the rolling update's surge path (replace.py)."""
