"""An engine once started: the managed process (start, adopt, probe, stop), readiness, start-up stages from
its log, its /metrics figures, and the load benchmark."""
