"""Which engine instance serves a request: the pool of a served name, the routing policy, failover's
exclusions and retries, and the hold while a sleeping deployment wakes."""
