"""A deployment's life once asked for: rolling updates, the reconcile loop, replicas, and
stopping without cutting requests short (drain, a node's drain and resume)."""
