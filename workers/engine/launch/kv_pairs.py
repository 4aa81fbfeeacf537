"""Which NPUs of a prefill engine and a decode engine hand KV to each other over Mooncake, so the panel's
preflight pings those pairs and no others (panel/deployments/launch/pd_fabric.py, docs/serving-plane.md §1).

What vllm-ascend's MooncakeConnectorV1 does, read in v0.13.0 (`vllm_ascend/distributed/mooncake_connector.py`)
and v0.25.1rc1 (`vllm_ascend/distributed/kv_transfer/kv_p2p/mooncake_connector.py`), the same in both:

- Each TP rank's worker runs its own transfer engine on its own NPU (protocol `ascend`), and a decode rank
  pulls its blocks from prefill ranks (`_get_remote_ranks_for_req`).
- Prefill TP = decode TP: decode rank r pulls from prefill rank r only.
- Prefill TP > decode TP (below is refused: kv_transfer.check_split): a decode rank pulls the KV heads it
  holds from prefill ranks that hold them. With prefill TP up to the model's KV heads that is a fixed block
  of prefill TP / decode TP ranks; with more prefill ranks than KV heads (each head on several ranks), and
  for MLA / sparse-attention models (DeepSeek: one latent "head" on every rank), the replica is drawn per
  request from a seed of its id. So over its requests a decode rank talks to every prefill rank holding one
  of its heads: that set is what is checked here.
- A rank holds the KV heads vLLM's tensor parallel gives it: `heads / tp` consecutive heads, or with more
  ranks than heads head `rank * heads // tp` (vllm-ascend v0.25.1rc1
  `distributed/kv_transfer/utils/utils.py`, get_tp_rank_head_mapping, says the same).
- Data parallel: each DP rank of the prefill names its own side-channel port in the request's
  kv_transfer_params (kv_port + dp_rank x tp x pp), and the prefill's API server picks the DP rank, so
  any decode DP rank pulls from any prefill DP rank.

The layerwise variant (MooncakeLayerwiseConnector, which the panel does not launch) has the prefill push:
v0.13.0 from rank t to decode rank (t // (prefill TP / decode TP)) % decode TP, v0.25.1rc1 to the decode
ranks sharing t's heads within one replica group; both are among the pairs above, so the check covers it.
Not covered: prefill pipeline or context parallel (the panel launches neither for a disaggregated role).

Which NPU a rank runs on: vLLM gives DP rank d of an engine the devices d x world .. (d + 1) x world - 1 of
its ASCEND_RT_VISIBLE_DEVICES list (world = TP with no PP; vllm `vllm/v1/engine/utils.py`,
get_device_indices in older releases, get_physical_gpu_ids_for_local_dp_rank in 0.32), and TP rank r of it the
r-th of those; the panel's launch lists the engine's logic ids in that variable in their order
(workers/engine/launch/command.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineRanks:
    """One engine as its NPUs hold it: `node`, and per DP rank its logic ids in TP rank order."""

    node: str
    dp_ranks: tuple[tuple[int, ...], ...]


def heads_of(rank: int, tp: int, heads: int) -> set[int]:
    """The KV heads TP rank `rank` of `tp` holds (several ranks hold the same head when tp > heads)."""
    if tp <= heads:
        per_rank = heads // tp
        return set(range(rank * per_rank, (rank + 1) * per_rank))
    return {rank * heads // tp}


def tp_pairs(prefill_tp: int, decode_tp: int, *, kv_heads: int | None, mla: bool) -> list[tuple[int, int]]:
    """(prefill TP rank, decode TP rank) pairs MooncakeConnectorV1 may move KV between, over all requests.
    `kv_heads` None (the model's facts do not say): every pair, since none can be ruled out."""
    if prefill_tp == decode_tp:
        return [(rank, rank) for rank in range(prefill_tp)]
    heads = 1 if mla else kv_heads
    every = [(p, d) for p in range(prefill_tp) for d in range(decode_tp)]
    if not heads:
        return every
    return [(p, d) for p, d in every if heads_of(p, prefill_tp, heads) & heads_of(d, decode_tp, heads)]


def engine_ranks(node: str, launch: dict) -> EngineRanks:
    """An engine's NPUs by DP rank and TP rank from its launch payload (logic_ids in the order the launch
    gives them to ASCEND_RT_VISIBLE_DEVICES, tensor_parallel_size)."""
    ids = tuple(int(logic_id) for logic_id in launch.get("logic_ids") or ())
    tp = max(1, int(launch.get("tensor_parallel_size") or 1))
    return EngineRanks(node=node, dp_ranks=tuple(ids[start : start + tp] for start in range(0, len(ids), tp)))


Pair = tuple[str, int, str, int]  # prefill node, its logic id, decode node, its logic id


def npu_pairs(prefill: EngineRanks, decode: EngineRanks, *, kv_heads: int | None, mla: bool) -> set[Pair]:
    """Every (prefill NPU, decode NPU) pair of these two engines that KV may cross, every DP rank of one
    with every DP rank of the other."""
    if not prefill.dp_ranks or not decode.dp_ranks:
        return set()
    ranks = tp_pairs(len(prefill.dp_ranks[0]), len(decode.dp_ranks[0]), kv_heads=kv_heads, mla=mla)
    return {
        (prefill.node, p_ids[p], decode.node, d_ids[d])
        for p_ids in prefill.dp_ranks
        for d_ids in decode.dp_ranks
        for p, d in ranks
        if p < len(p_ids) and d < len(d_ids)
    }
