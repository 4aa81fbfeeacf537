"""The multi-turn chat workload of bench/routing.py, defined once so that bench/routing_ceiling.py replays the
very conversations the bench sends (same prompts, same arrival times, same think times).

Open loop, as users arrive at a chat service: conversations start at random times (exponential gaps of mean
--arrival-s), and each follow-up question is sent a think time (exponential, mean --think-s) after the
answer to the last one ended, so the turns of different conversations interleave and many more
conversations are open at once than run at once. Every conversation starts with one system prompt shared by
all (--system-words) and its own opening question (--opening-words), then asks --turns - 1 follow-ups
(--question-words each) on top of its growing history; the engine's answers (--max-tokens, ignore_eos) are
part of that history. Seeded: the same --seed gives the same text and timings. Standard library only (the
ceiling tool runs in the engine venv, the bench in the panel's).
"""

from __future__ import annotations

import argparse
import random
from dataclasses import asdict, dataclass

WORDS = " ".join(
    (
        "npu hbm kernel tensor pipeline cluster node rack switch fabric cache block prefix decode prefill",
        "token batch queue latency throughput model weight layer expert router shard replica gateway",
        "engine memory",
        "stream request answer context window chip core vector cube link ring mesh topology bandwidth",
    )
).split()


@dataclass(frozen=True)
class Workload:
    conversations: int = 64
    turns: int = 6
    max_tokens: int = 32
    system_words: int = 24
    opening_words: int = 40
    question_words: int = 30
    arrival_s: float = 0.5
    think_s: float = 20.0
    seed: int = 1

    def params(self) -> dict:
        """The workload's parameters, for a bench's JSON line."""
        return asdict(self)


@dataclass(frozen=True)
class Conversation:
    index: int
    start_s: float  # when its first question is sent, from the start of the phase
    opening: str
    questions: tuple[str, ...]  # the follow-ups, one per turn after the first
    thinks_s: tuple[float, ...]  # the think time before each follow-up, after the last answer ended


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)) + "."


def build(workload: Workload, text: str = "") -> tuple[dict, list[Conversation]]:
    """The shared system message and the conversations, in order of arrival. `text` salts the words only:
    two phases of one bench send the same sizes at the same times, with prompts neither finds cached."""
    rng = random.Random(f"{workload.seed}:{text}")
    system = {
        "role": "system",
        "content": "You answer questions about serving. " + sentence(rng, workload.system_words),
    }
    clock = random.Random(workload.seed * 7919)
    conversations, start = [], 0.0
    for index in range(workload.conversations):
        talk = random.Random(f"{workload.seed}:{text}:{index}")
        follow_ups = workload.turns - 1
        conversations.append(
            Conversation(
                index=index,
                start_s=start,
                opening=sentence(rng, workload.opening_words),
                questions=tuple(sentence(talk, workload.question_words) for _ in range(follow_ups)),
                thinks_s=tuple(clock.expovariate(1 / workload.think_s) for _ in range(follow_ups)),
            )
        )
        start += clock.expovariate(1 / workload.arrival_s) if workload.arrival_s > 0 else 0.0
    return system, conversations


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = Workload()
    for name, value in asdict(defaults).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)


def from_args(args: argparse.Namespace) -> Workload:
    return Workload(**{name: getattr(args, name) for name in asdict(Workload())})
