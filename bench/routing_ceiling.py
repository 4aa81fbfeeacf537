"""What bench/routing.py's workload lets any router reach: the engines' prefix-cache hit rate, replayed token
by token, when each conversation stays on one engine, when each turn goes to a random one, and when turns
alternate.

    .venv-engine/bin/python bench/routing_ceiling.py [--conversations 32] [--turns 6] [--max-tokens 32]

The same system prompt, openings and questions as bench/routing.py (its `sentence` and seeds), the tiny
llama's own tokenizer and chat template (workers.models.tiny), 32-token blocks hashed in a chain as vLLM's
are, a cache on each of two engines that keeps every block it computed (no eviction: the most a router can
be given), the last prompt token never a hit (vLLM computes it). Each answer is --max-tokens random token ids
whose decoded text the client sends back as history, as the real engines' random weights answer. Runs in the
engine venv (transformers). Last line JSON: {"sticky", "random", "alternate", "ratio_vs_random",
"ratio_vs_alternate"}: the best hit_rate_ratio prefix routing could show against either.
"""

import argparse
import importlib.util
import json
import random
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
BLOCK = 32
ENGINES = 2


def _routing_bench():
    spec = importlib.util.spec_from_file_location("bench_routing", REPO / "bench" / "routing.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def block_hashes(ids: list[int]) -> list[int]:
    hashes, previous = [], 0
    for start in range(0, len(ids) // BLOCK * BLOCK, BLOCK):
        previous = hash((previous, tuple(ids[start : start + BLOCK])))
        hashes.append(previous)
    return hashes


def replay(policy: str, tokenizer, args, routing_bench, seed: int = 1) -> float:
    rng, picks = random.Random(seed), random.Random(7)
    system = {
        "role": "system",
        "content": "You answer questions about serving. " + routing_bench.sentence(rng, 24),
    }
    openings = [routing_bench.sentence(rng, 40) for _ in range(args.conversations)]
    caches: list[set[int]] = [set() for _ in range(ENGINES)]
    queried = hits = 0
    for index in range(args.conversations):
        talk = random.Random(seed * 1000 + index)
        messages = [system, {"role": "user", "content": openings[index]}]
        for turn in range(args.turns):
            encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
            ids = list(encoded["input_ids"])
            engine = {"sticky": index, "random": picks.randrange(ENGINES), "alternate": index + turn}[policy]
            cache = caches[engine % ENGINES]
            cached = 0
            for block in block_hashes(ids[:-1]):
                if block not in cache:
                    break
                cached += BLOCK
            queried, hits = queried + len(ids), hits + cached
            answer = [picks.randrange(10, tokenizer.vocab_size) for _ in range(args.max_tokens)]
            cache.update(block_hashes(ids + answer))
            messages = messages + [
                {"role": "assistant", "content": tokenizer.decode(answer, skip_special_tokens=True)},
                {"role": "user", "content": routing_bench.sentence(talk, 30)},
            ]
    return hits / queried


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--conversations", type=int, default=32)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    from workers.models.tiny import main as make_tiny

    folder = Path(tempfile.mkdtemp(prefix="routing-ceiling-")) / "tiny-llama"
    if make_tiny([str(folder), "--arch", "llama", "--hidden", "256", "--heads", "8", "--layers", "4"]):
        raise SystemExit("error: the tiny model could not be made")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    routing_bench = _routing_bench()
    rates = {
        policy: replay(policy, tokenizer, args, routing_bench) for policy in ("sticky", "random", "alternate")
    }
    result = {name: round(rate, 4) for name, rate in rates.items()}
    result["ratio_vs_random"] = round(rates["sticky"] / rates["random"], 3)
    result["ratio_vs_alternate"] = round(rates["sticky"] / rates["alternate"], 3)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
