"""A byte-level BPE tokenizer trained locally on a small built-in corpus, for generated tiny models.

Byte-level BPE can encode any text (every byte is in the alphabet), so the engine never meets an unknown
token, and training on a few paragraphs takes well under a second with no download.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

# Token strings, not secrets.
BOS_TOKEN = "<s>"  # noqa: S105
EOS_TOKEN = "</s>"  # noqa: S105
PAD_TOKEN = "<pad>"  # noqa: S105
CHAT_START = "<|im_start|>"
CHAT_END = "<|im_end|>"
SPECIAL_TOKENS = [PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, CHAT_START, CHAT_END]

# ChatML-style, like Qwen's; generation stops at <|im_end|> (listed in generation_config's eos ids).
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

CORPUS = [
    "The Ascend panel takes a bare Kunpeng server to a running language model service.",
    "Install the driver and firmware, then the CANN toolkit, then torch, torch-npu, vllm and vllm-ascend.",
    "Check npu-smi info before you start: every NPU should report health OK and free HBM memory.",
    "Quantize the weights to W8A8 to halve their size; activations are quantized per token at run time.",
    "Pick a tensor parallel size that divides the attention heads and fits the weights into HBM.",
    "Hello! How can I help you today? I can answer questions, write code and summarise documents.",
    "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n",
    "for i in range(10):\n    if i % 2 == 0:\n        print(i)\n",
    '{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}',
    "User: what is the capital of France?\nAssistant: The capital of France is Paris.",
    "User: write a haiku about servers.\nAssistant: Fans hum through the night, tokens flow like quiet rain.",
    "昇腾处理器上部署大模型：安装驱动、固件和 CANN 工具包，然后启动 vLLM 服务。",
    "你好！我是一个小模型，只用于测试。请问有什么可以帮您？",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 3.14 2.718 -1 +1 = % # @ ! ? ( ) [ ] { } < > / \\ | ~",
]


def train_tokenizer(vocab_size: int) -> Tokenizer:
    """Train byte-level BPE with at most vocab_size tokens (fewer if the corpus runs out of merges)."""
    minimum = len(pre_tokenizers.ByteLevel.alphabet()) + len(SPECIAL_TOKENS)
    if vocab_size < minimum:
        raise ValueError(f"vocab_size must be at least {minimum} (256 bytes + special tokens)")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Repeat the corpus so frequent pairs clear the trainer's minimum frequency.
    tokenizer.train_from_iterator(CORPUS * 4, trainer=trainer)
    return tokenizer


def write_tokenizer(folder: Path, vocab_size: int, max_length: int) -> dict[str, int]:
    """Write tokenizer.json and tokenizer_config.json; returns the ids of the special tokens."""
    tokenizer = train_tokenizer(vocab_size)
    tokenizer.save(str(folder / "tokenizer.json"))
    ids: dict[str, int] = {}
    for token in SPECIAL_TOKENS:
        found = tokenizer.token_to_id(token)
        if found is None:  # the trainer was given them as special tokens: each has an id
            raise RuntimeError(f"the trained tokenizer has no id for {token!r}")
        ids[token] = found
    added_tokens_decoder = {
        str(ids[token]): {
            "content": token,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for token in SPECIAL_TOKENS
    }
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "added_tokens_decoder": added_tokens_decoder,
        "additional_special_tokens": [CHAT_START, CHAT_END],
        "chat_template": CHAT_TEMPLATE,
        "model_max_length": max_length,
        "clean_up_tokenization_spaces": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2, ensure_ascii=False))
    return {
        "bos_token_id": ids[BOS_TOKEN],
        "eos_token_id": ids[EOS_TOKEN],
        "pad_token_id": ids[PAD_TOKEN],
        "chat_end_id": ids[CHAT_END],
    }
