"""The launch: per-node engine tuning and its review, the container runtime and images, engine
keys, the NPU network gate before a multi-node start, and a failed start's findings."""
