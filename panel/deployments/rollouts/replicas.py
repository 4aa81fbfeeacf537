"""Replicas: a spec's `replicas: N` as N deployment rows.

The spec's `name` is the primary row (replica 1); replicas 2..N are rows named `<name>-r<i>` whose
`replica_of` is the primary. Every replica serves the primary's served model name, so the /v1 gateway
(which pools every running deployment serving a model name) balances over them without knowing about
replicas. Each replica is planned like the primary but on its own free NPUs and its own port: with
`engine.port` P, replica i listens on P + 2(i - 1) (each engine also takes the port after its own); without
it, the panel picks a free one per replica. A surge replica of a rollout always gets a picked port.
"""

from __future__ import annotations

import re
from typing import Any

from django.utils.translation import gettext as _

from panel.core.domain.choices import DesiredState
from panel.core.domain.errors import InvalidInput
from panel.deployments.models import Deployment

# "-r64" must still fit the 63-character name of a deployment.
MAX_NAME_WITH_REPLICAS = 59
MAX_REPLICAS = 64
PORT_MAX = 65535


def replica_name(name: str, index: int) -> str:
    return name if index == 1 else f"{name}-r{index}"


def index_of(primary_name: str, row_name: str) -> int:
    """1 for the primary, i for `<primary>-r<i>`, 0 for a name that is no replica of it."""
    if row_name == primary_name:
        return 1
    found = re.fullmatch(re.escape(primary_name) + r"-r(\d+)", row_name)
    return int(found.group(1)) if found else 0


def check(spec: dict[str, Any], name: str) -> None:
    """400 when the spec cannot have its replicas: each replica takes NPUs and ports of its own."""
    wanted = spec["replicas"]
    if wanted == 1:
        return
    if wanted > MAX_REPLICAS:
        _fail("replicas", _("At most {n} replicas.").format(n=MAX_REPLICAS))
    if len(name) > MAX_NAME_WITH_REPLICAS:
        _fail(
            "name",
            _(
                "With several replicas the name has at most {n} characters (replicas are named {name}-r2, …)."
            ).format(n=MAX_NAME_WITH_REPLICAS, name=name),
        )
    npus = (spec.get("placement") or {}).get("npus")
    if spec.get("nodes") or isinstance(npus, list):
        _fail(
            "replicas",
            _(
                "Replicas each take their own free NPUs: give placement.npus as a count or auto, "
                "not NPU ids or nodes."
            ),
        )
    port = spec["engine"].get("port")
    if port and port + 2 * wanted - 1 > PORT_MAX:
        _fail(
            "engine.port",
            _("Replica {n} would listen on {port}, above {max}: give a lower engine.port.").format(
                n=wanted, port=port + 2 * (wanted - 1), max=PORT_MAX
            ),
        )


def _fail(field_name: str, message: str):
    raise InvalidInput({field_name: [message]})


def served_name(spec: dict[str, Any], primary: Deployment | None) -> str:
    """The model name every replica serves: the spec's, else what the primary serves now, else the name."""
    if "served_model_name" in spec["engine_given"] and spec["engine"].get("served_model_name"):
        return spec["engine"]["served_model_name"]
    if primary is not None:
        return (primary.spec or {}).get("served_model_name") or primary.name
    return spec["name"]


def port_of(spec: dict[str, Any], index: int) -> int | None:
    """The port the spec gives replica `index`: engine.port + 2(index - 1); None when the spec gives none
    or for a surge replica (an index above the spec's replicas), whose port the panel picks."""
    port = spec["engine"].get("port") if "port" in spec["engine_given"] else None
    if not port or index > spec["replicas"]:
        return None
    return port + 2 * (index - 1)


def _npus_of_its_own(spec: dict[str, Any]) -> dict[str, Any]:
    """A surge replica stands beside the replica it replaces: as many NPUs as the spec names, wherever free
    on the same node (the named ones are that replica's). `rollout undo` restarted the only replica in place
    with "No free NPUs for a surge replica" and 7 free: its spec named NPU 0."""
    placement = spec.get("placement") or {}
    if isinstance(placement.get("npus"), list):
        return {**spec, "placement": {**placement, "npus": len(placement["npus"])}}
    nodes = spec.get("nodes") or []
    if len(nodes) == 1:
        return {**spec, "nodes": [], "placement": {"node": nodes[0]["node"], "npus": len(nodes[0]["npus"])}}
    return spec


def spec_for(spec: dict[str, Any], index: int, served: str) -> dict[str, Any]:
    """The spec of replica `index`: its own name, the shared served model name and its own port."""
    if index == 1:
        return spec
    if index > spec["replicas"]:
        spec = _npus_of_its_own(spec)
    port = port_of(spec, index)
    engine = {key: value for key, value in spec["engine"].items() if key != "port"}
    given = {*spec["engine_given"], "served_model_name"} - {"port"}
    if port is not None:
        engine["port"] = port
        given.add("port")
    return {
        **spec,
        "name": replica_name(spec["name"], index),
        "engine": {**engine, "served_model_name": served},
        "engine_given": sorted(given),
    }


def members(primary: Deployment) -> list[Deployment]:
    """Replicas 2..N that are not being deleted, by index (the primary itself is not in the list)."""
    rows = [
        row
        for row in primary.replicas.exclude(desired_state=DesiredState.DELETED)
        if index_of(primary.name, row.name) > 1
    ]
    return sorted(rows, key=lambda row: index_of(primary.name, row.name))


def next_free_index(primary: Deployment) -> int:
    """An index above every row of the primary, deleted ones still stopping included."""
    indexes = [index_of(primary.name, name) for name in primary.replicas.values_list("name", flat=True)]
    return max([primary.replicas_wanted, *indexes]) + 1
