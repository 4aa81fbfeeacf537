"""How a node joins and is trusted: join tokens, each node's key and the checks on what agents send, its
broker user, the ingest queue's guard, the agent package, and SSH nodes."""
