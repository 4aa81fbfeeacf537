"""Command line of the planner: `python -m workers.engine.planner.plan_cli MODEL_DIR --npu-memory-gb 64 ...`.

Prints the plan as JSON. Exit status: 0 it fits, 1 it does not (the reasons say why, and "proposals" what
would fit: more nodes, W8A8, an A3 node...), 2 bad input. With --prompt-tokens and --output-tokens it adds
"pd": the prefill/decode split for those lengths on these NPUs, or why disaggregation is not worth it.
MODEL_DIR may hold only config.json and model.safetensors.index.json: the weights' size then comes from
the index's total_size. --npu-memory-gb is in GiB, as npu-smi counts (65536 MB = 64 GiB).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from workers.engine.planner.memory import GIB
from workers.engine.planner.plan_pd import DEFAULT_TPOT_MS, Workload, split
from workers.engine.planner.plan_proposals import with_proposals
from workers.engine.planner.plan_types import CHIPS, PlanInput, PlanInputError
from workers.models.inspect import inspect_model


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workers.engine.planner.plan_cli",
        description="Plan how a model fits Ascend NPUs with vLLM (TP, DP, KV cache). Sizes in GiB.",
    )
    parser.add_argument("model_dir", help="folder with config.json and the weights or their index")
    parser.add_argument("--npu-memory-gb", type=float, required=True, help="memory of one NPU in GiB (64)")
    parser.add_argument("--npus-per-node", type=int, required=True)
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--quantization", choices=["ascend"], default=None, help="plan msModelSlim W8A8")
    parser.add_argument("--dtype", choices=["auto", "bfloat16", "float16", "float32"], default="auto")
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--tensor-parallel-size", type=int, default=None, help="check this TP instead")
    parser.add_argument("--data-parallel-size", type=int, default=None)
    parser.add_argument("--chip", choices=CHIPS, default="910b")
    parser.add_argument("--prompt-tokens", type=int, default=None, help="expected prompt length: plan P:D")
    parser.add_argument("--output-tokens", type=int, default=None, help="expected output length: plan P:D")
    parser.add_argument("--tpot-ms", type=int, default=DEFAULT_TPOT_MS, help="decode step target (50)")
    parser.add_argument("--vllm-ascend", default=None, help="installed vllm-ascend version (EPLB per role)")
    return parser


def load_facts(model_dir: str) -> dict[str, Any]:
    """inspect_model's facts plus the few config values the planner also uses."""
    # Imported here so the planner module itself stays a pure function library.
    facts = inspect_model(model_dir)
    return with_config_extras(
        facts, json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    )


def with_config_extras(facts: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """Add tie_word_embeddings, MTP layers and routed-expert sizes when the facts do not carry them yet."""
    nested = config.get("text_config")
    text_config: dict[str, Any] = nested if isinstance(nested, dict) else config
    extended = dict(facts)
    extended.setdefault("tie_word_embeddings", bool(text_config.get("tie_word_embeddings", False)))
    # DeepSeek-V3 / R1 carry one multi-token-prediction layer, which MTP speculative decoding runs.
    extended.setdefault("mtp_layers", int(text_config.get("num_nextn_predict_layers") or 0))
    if facts.get("moe"):
        moe = dict(facts["moe"])
        moe.setdefault("moe_intermediate_size", text_config.get("moe_intermediate_size"))
        moe.setdefault("first_dense_layers", text_config.get("first_k_dense_replace") or 0)
        extended["moe"] = moe
    return extended


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        facts = load_facts(args.model_dir)
    except Exception as error:  # NotAModelError, OSError, bad JSON: all mean "fix MODEL_DIR"
        print(f"error: cannot read the model in {args.model_dir}: {error}", file=sys.stderr)
        return 2
    request = PlanInput(
        npu_memory_bytes=int(args.npu_memory_gb * GIB),
        npus_per_node=args.npus_per_node,
        nodes=args.nodes,
        chip=args.chip,
        quantization=args.quantization,
        dtype=args.dtype,
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        tensor_parallel_size=args.tensor_parallel_size,
        data_parallel_size=args.data_parallel_size,
    )
    lengths = (args.prompt_tokens, args.output_tokens)
    if any(lengths) and not all(length and length > 0 for length in lengths):
        print("error: give both --prompt-tokens and --output-tokens, each at least 1", file=sys.stderr)
        return 2
    try:
        result, proposals = with_proposals(facts, request)
        answer = {**result.as_dict(), "proposals": [proposal.as_dict() for proposal in proposals]}
        if args.prompt_tokens and args.output_tokens:
            workload = Workload(args.prompt_tokens, args.output_tokens, args.tpot_ms)
            answer["pd"] = split(facts, request, workload, args.vllm_ascend).as_dict()
    except PlanInputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(answer, indent=2))
    return 0 if result.fits else 1


if __name__ == "__main__":
    sys.exit(main())
