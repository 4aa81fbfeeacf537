"""The stand-in engine's scheduler and prefix cache: what makes queueing and prefix reuse show.

As vLLM V1: at most `--max-num-seqs` sequences run at once and the rest wait in arrival order
(`vllm:num_requests_running` / `vllm:num_requests_waiting`); a paused scheduler (an engine asleep) runs
nothing and lets requests wait. The prefix cache keeps full blocks of `--block-size` tokens, each block's
hash chained to its parent's so a block only matches after the same prefix, evicted least recently used
when the KV cache has no room for more; as vLLM, at least the prompt's last token is always computed.
"""

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable

ROOT_HASH = b"sim-prefix-root"


class Scheduler:
    def __init__(self, max_num_seqs: int):
        self.max_num_seqs = max(1, max_num_seqs)
        self.condition = threading.Condition()
        self.running = 0
        self.waiting = 0
        self.paused = False
        self.frozen = False  # a sleep with mode keep: what runs stops between tokens until the wake
        self.aborting = 0  # bumped when a sleep aborts what runs; a request started before it stops
        self.next_ticket = 0
        self.serving_ticket = 0  # first come, first served: a ticket is admitted only in its turn

    def admit(self) -> int:
        """Wait for a running slot (in arrival order, never while paused); returns the abort epoch the
        request started in."""
        with self.condition:
            ticket = self.next_ticket
            self.next_ticket += 1
            self.waiting += 1
            while self.paused or self.running >= self.max_num_seqs or ticket != self.serving_ticket:
                self.condition.wait()
            self.waiting -= 1
            self.serving_ticket += 1
            self.running += 1
            self.condition.notify_all()
            return self.aborting

    def release(self) -> None:
        with self.condition:
            self.running -= 1
            self.condition.notify_all()

    def aborted(self, epoch: int) -> bool:
        """Whether a sleep aborted the request that started in `epoch`; waits while it is kept frozen."""
        with self.condition:
            self.condition.wait_for(lambda: not self.frozen or self.aborting != epoch)
            return self.aborting != epoch

    def pause(self, mode: str) -> None:
        """Stop scheduling; what runs is aborted (abort), finishes (wait) or stays frozen (keep)."""
        with self.condition:
            self.paused = True
            self.frozen = mode == "keep"
            if mode == "abort":
                self.aborting += 1
            self.condition.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self.condition:
            return self.condition.wait_for(lambda: self.running == 0, timeout)

    def resume(self) -> None:
        with self.condition:
            self.paused = self.frozen = False
            self.condition.notify_all()


def block_hashes(tokens: list[str], block_size: int) -> list[bytes]:
    """The chained hash of each full block: equal hashes mean equal tokens from the prompt's start."""
    hashes, parent = [], ROOT_HASH
    for start in range(0, len(tokens) - block_size + 1, block_size):
        block = "\x00".join(tokens[start : start + block_size]).encode()
        parent = hashlib.sha256(parent + block).digest()
        hashes.append(parent)
    return hashes


def prompt_tokens_of(chat: bool, body: dict) -> list[str]:
    """The prompt as the sim's tokens (words), chat messages in a template of 5 tokens each, so equal
    prompts give equal tokens and the prefix cache sees what a tokenizer would."""
    if not chat:
        prompt = body["prompt"]
        return (prompt if isinstance(prompt, str) else " ".join(map(str, prompt))).split() or ["<s>"]
    tokens: list[str] = []
    for message in body["messages"]:
        if isinstance(message, dict):
            role = str(message.get("role", ""))
            tokens += [
                "<|im_start|>",
                role,
                "\n",
                *str(message.get("content", "")).split(),
                "<|im_end|>",
                "\n",
            ]
    return tokens or ["<s>"]


class PrefixCache:
    def __init__(self, block_size: int, capacity_blocks: int, enabled: bool = True):
        self.block_size = max(1, block_size)
        self.capacity_blocks = max(1, capacity_blocks)
        self.enabled = enabled
        self.blocks: OrderedDict[bytes, None] = OrderedDict()
        self.lock = threading.Lock()

    def schedule(self, tokens: list[str]) -> int:
        """Look the prompt up and keep its blocks; returns how many of its tokens were cached."""
        if not self.enabled:
            return 0
        hashes = block_hashes(tokens, self.block_size)
        # As vLLM: the last token is computed even when the whole prompt is cached (it gives the logits).
        usable = (len(tokens) - 1) // self.block_size
        with self.lock:
            hit = 0
            for block in hashes[:usable]:
                if block not in self.blocks:
                    break
                hit += 1
            self._keep(hashes)
        return hit * self.block_size

    def insert(self, hashes: Iterable[bytes]) -> None:
        """Blocks that arrived computed elsewhere (a KV transfer from a prefill engine)."""
        if self.enabled:
            with self.lock:
                self._keep(hashes)

    def _keep(self, hashes: Iterable[bytes]) -> None:
        for block in hashes:
            self.blocks[block] = None
            self.blocks.move_to_end(block)
        while len(self.blocks) > self.capacity_blocks:
            self.blocks.popitem(last=False)

    def clear(self) -> None:
        with self.lock:
            self.blocks.clear()
