"""NPU and host metrics: the inbox the panel worker drains, per-sender rates, live values in Redis, SSH nodes'
probes, the fleet summary, /metrics, and the minute history with its downsampling and hourly roll-up."""
