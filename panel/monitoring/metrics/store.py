"""Live metrics in Redis: per node the latest message, a ring buffer of compact samples (one hour at full
resolution), the set of open alert keys, and throttle keys. Nothing here touches the database.

Keys (all under `mon:`):
  latest:<node>   JSON of the last "metrics" message plus "received" (expires, so a dead node drops out)
  ring:<node>     sorted set, score = sample time, member = compact sample JSON (see `compact`)
  nodes           set of node names that ever sent metrics (the Prometheus collector and downsampler walk it)
  alerts:<node>   set of open alert keys, with SENTINEL once loaded from the database
  hb:<node>       exists while the last heartbeat write of a node that was not online is recent enough
  hb-heard        sorted set, score = when the drain took it (Unix seconds), member = the id of a node whose
                  metrics arrived since the last batched heartbeat write (its heartbeat is that time, not
                  the write's)
  hb-write        exists while the last batched heartbeat write is recent enough
  ds:<node>       epoch of the last minute written to the minute table
  fleet-due       exists while a fleet summary was sent less than a second ago
  figures         hash, node -> JSON sums over the chips of its newest sample, for the fleet summary's
                  live figures (panel.monitoring.metrics.fleet)
"""

import orjson

from panel.core.infra.panel_redis import client, texts

PREFIX = "mon:"
NODES = f"{PREFIX}nodes"
FLEET_DUE = f"{PREFIX}fleet-due"
FIGURES = f"{PREFIX}figures"
HEARTBEATS_DUE = f"{PREFIX}hb-heard"
HEARTBEATS_WRITE = f"{PREFIX}hb-write"
SENTINEL = "-"
LATEST_TTL_S = 120

__all__ = ["client"]  # the panel's Redis (panel.core.infra.panel_redis), used by every function here


def latest_key(node: str) -> str:
    return f"{PREFIX}latest:{node}"


def ring_key(node: str) -> str:
    return f"{PREFIX}ring:{node}"


def alerts_key(node: str) -> str:
    return f"{PREFIX}alerts:{node}"


def heartbeat_key(node: str) -> str:
    return f"{PREFIX}hb:{node}"


def downsampled_key(node: str) -> str:
    return f"{PREFIX}ds:{node}"


def compact(message: dict, epoch: float) -> bytes:
    """A ring-buffer member: t, host [cpu, mem used, mem total, load1], npus [[npu, chip, util, hbm used,
    power, temp, memory used], ...]. Short on purpose: 3,600 of them per node sit in memory."""
    host = message.get("host") or {}
    return orjson.dumps(
        {
            "t": round(epoch, 3),
            "h": [
                host.get("cpu_pct"),
                host.get("memory_used_mb"),
                host.get("memory_total_mb"),
                host.get("load1"),
            ],
            "n": [
                [
                    n["npu_id"],
                    n["chip_id"],
                    n.get("aicore_pct"),
                    n.get("hbm_used_mb"),
                    n.get("power_w"),
                    n.get("temp_c"),
                    n.get("memory_used_mb"),
                ]
                for n in message.get("npus") or []
            ],
        }
    )


def read_ring(node: str, since_epoch: float, until_epoch: float | str = "+inf") -> list[dict]:
    members = texts(client().zrangebyscore(ring_key(node), since_epoch, until_epoch))
    return [orjson.loads(member) for member in members]


def read_latest(nodes: list[str]) -> dict[str, dict]:
    if not nodes:
        return {}
    values = client().mget([latest_key(n) for n in nodes])
    return {node: orjson.loads(value) for node, value in zip(nodes, values, strict=True) if value}


def known_nodes() -> list[str]:
    return sorted(texts(client().smembers(NODES)))


def forget_node(node: str) -> None:
    """Drop everything kept about a node (tests, and a node that was deleted)."""
    client().delete(
        latest_key(node), ring_key(node), alerts_key(node), heartbeat_key(node), downsampled_key(node)
    )
    client().srem(NODES, node)
    client().hdel(FIGURES, node)
