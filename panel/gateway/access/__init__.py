"""Who calls and what they may: the API token's identity (cached, sealed in Redis) and the per-key request and
token limits."""
