"""The vLLM flags a user may add to a launch, with the type of value each takes.

Anything not listed is refused: the panel builds the flags that decide placement and memory
(TP, DP, ports, devices) itself, and an unknown flag would fail vLLM's start-up minutes later anyway.
"""

from __future__ import annotations

import json
import re
from typing import Any

BOOL = "bool"
INT = "int"
FLOAT = "float"
JSON = "json"
NAME = "name"  # a parser / plugin name: letters, digits, _ - .
PATH = "path"  # an absolute path on the host

ALLOWED_FLAGS: dict[str, Any] = {
    "--max-num-seqs": INT,
    "--max-num-batched-tokens": INT,
    "--max-logprobs": INT,
    "--seed": INT,
    "--block-size": ("128",),  # vllm-ascend pages KV in 128-token blocks
    # No --kv-cache-dtype: vLLM's parser has no int8 (Ascend's int8 KV cache is an additional_config
    # setting), which tests/engine/test_vllm_argv.py found; fp8 choices do not run on Ascend.
    "--swap-space": FLOAT,
    "--cpu-offload-gb": FLOAT,
    "--enable-prefix-caching": BOOL,
    "--no-enable-prefix-caching": BOOL,
    "--enable-chunked-prefill": BOOL,
    "--no-enable-chunked-prefill": BOOL,
    "--trust-remote-code": BOOL,
    "--enable-auto-tool-choice": BOOL,
    "--disable-log-stats": BOOL,
    "--disable-log-requests": BOOL,
    "--enable-log-requests": BOOL,
    "--disable-fastapi-docs": BOOL,
    "--enable-prompt-tokens-details": BOOL,
    "--tool-call-parser": NAME,
    "--reasoning-parser": NAME,
    "--response-role": NAME,
    "--chat-template": PATH,
    "--tokenizer": PATH,
    "--tokenizer-mode": ("auto", "slow", "mistral"),
    # sharded_state: the 310P's W8A8SC builds are saved per TP rank (vllm-ascend's Qwen3-Dense tutorial).
    "--load-format": ("auto", "safetensors", "pt", "sharded_state"),
    "--generation-config": ("auto", "vllm"),
    "--scheduling-policy": ("fcfs", "priority"),
    "--additional-config": JSON,
    "--compilation-config": JSON,
    "--speculative-config": JSON,
    "--hf-overrides": JSON,
    "--override-generation-config": JSON,
    "--limit-mm-per-prompt": JSON,
}

# Flags that make the engine run code or read files the panel did not stage: the model's own Python
# (--trust-remote-code), a template or tokenizer from any path on the host, and JSON configs that name
# classes, plugins, passes or other models to load. The engine runs as root on the node, so the panel
# lets only admins set these (deployments/placement/planning.py); everything else stays open to operators.
CODE_LOADING_FLAGS = frozenset(
    {
        "--trust-remote-code",
        "--chat-template",
        "--tokenizer",
        "--hf-overrides",
        "--additional-config",
        "--compilation-config",
        "--speculative-config",
    }
)


def code_loading_flags(extra: dict[str, Any]) -> list[str]:
    """The flags of `extra` that load code or files (a switch set to false loads nothing), in order."""
    return [flag for flag, value in extra.items() if flag in CODE_LOADING_FLAGS and value is not False]


# Flags the launch builds from the plan; naming the field to set instead is the helpful answer.
PLANNED_FLAGS = {
    "--model": "model_path",
    "--served-model-name": "served_model_name",
    "--host": "host",
    "--port": "port",
    "--tensor-parallel-size": "tensor_parallel_size",
    "-tp": "tensor_parallel_size",
    "--data-parallel-size": "data_parallel_size",
    "-dp": "data_parallel_size",
    "--max-model-len": "max_model_len",
    "--dtype": "dtype",
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--quantization": "quantization",
    "-q": "quantization",
    "--enforce-eager": "enforce_eager",
    "--enable-expert-parallel": "enable_expert_parallel",
    "--headless": "multi_node",
    "--data-parallel-size-local": "multi_node",
    "--data-parallel-start-rank": "multi_node",
    "--data-parallel-address": "multi_node",
    "--data-parallel-rpc-port": "multi_node",
}

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


class FlagError(ValueError):
    """An extra flag is not allowed or its value has the wrong type; the message says which."""


# JSON flags the launch itself may fill (CPU binding and EPLB in --additional-config, the graph mode, MTP).
PLANNED_JSON_FLAGS = ("--additional-config", "--compilation-config", "--speculative-config")
# vLLM refuses these flags without their partner (validate_parsed_serve_args in its cli_args.py).
NEEDS = {"--enable-auto-tool-choice": "--tool-call-parser"}


def flag_arguments(extra: dict[str, Any], planned: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """argv items for the user's extra flags, in the order given, then the planned JSON flags the user did
    not give; in a JSON flag both give, the user's keys win. Raises FlagError on anything unsafe."""
    merged = dict(extra)
    for flag, value in (planned or {}).items():
        if flag not in PLANNED_JSON_FLAGS:
            raise FlagError(f"{flag} is not a flag the launch fills in")
        if value:
            user = _json_object(flag, extra[flag]) if flag in extra else {}
            merged[flag] = merge_json(value, user)
    for flag, partner in NEEDS.items():
        if merged.get(flag) not in (None, False) and partner not in merged:
            raise FlagError(f"{flag} needs {partner} too (vLLM refuses to start without it); add {partner}")
    argv: list[str] = []
    for flag, value in merged.items():
        argv.extend(_one_flag(flag, value))
    return argv


def merge_json(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`base` with `override` laid over it, nested objects merged key by key."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_json(merged[key], value)
        else:
            merged[key] = value
    return merged


def json_flag_value(extra: dict[str, Any], flag: str) -> dict[str, Any]:
    """The user's JSON object for `flag` ({} when absent); raises FlagError when it is not an object."""
    return _json_object(flag, extra[flag]) if flag in extra else {}


def parse_flag_text(tokens: list[str]) -> dict[str, Any]:
    """Turn ["--max-num-seqs", "64", "--enable-prefix-caching"] (e.g. shlex.split of a form field)
    into the mapping flag_arguments takes, checking each flag as it goes."""
    extra: dict[str, Any] = {}
    position = 0
    while position < len(tokens):
        token = tokens[position]
        flag, has_inline, inline = token.partition("=")
        _check_name(flag)
        if ALLOWED_FLAGS[flag] == BOOL:
            if has_inline:
                raise FlagError(f"{flag} is a switch and takes no value; remove '={inline}'")
            extra[flag] = True
            position += 1
            continue
        if has_inline:
            extra[flag] = inline
            position += 1
        elif position + 1 < len(tokens):
            extra[flag] = tokens[position + 1]
            position += 2
        else:
            raise FlagError(f"{flag} needs a value")
    return extra


def _check_name(flag: str) -> None:
    if flag in PLANNED_FLAGS:
        raise FlagError(f"{flag} is set by the panel from the plan; change the field {PLANNED_FLAGS[flag]!r}")
    if flag not in ALLOWED_FLAGS:
        raise FlagError(f"{flag} is not an allowed vLLM flag; allowed: {', '.join(sorted(ALLOWED_FLAGS))}")


def _one_flag(flag: str, value: Any) -> list[str]:
    _check_name(flag)
    kind = ALLOWED_FLAGS[flag]
    if kind == BOOL:
        if value not in (True, False):
            raise FlagError(f"{flag} is a switch: give true or false, not {value!r}")
        return [flag] if value else []
    return [flag, _value_text(flag, kind, value)]


def _value_text(flag: str, kind: Any, value: Any) -> str:
    if isinstance(kind, tuple):
        if str(value) not in kind:
            raise FlagError(f"{flag} must be one of {', '.join(kind)}; got {value!r}")
        return str(value)
    if kind == INT:
        if isinstance(value, bool) or not re.fullmatch(r"\d{1,9}", str(value)):
            raise FlagError(f"{flag} needs a whole number; got {value!r}")
        return str(int(value))
    if kind == FLOAT:
        if isinstance(value, bool) or not re.fullmatch(r"\d{1,6}(\.\d{1,6})?", str(value)):
            raise FlagError(f"{flag} needs a number such as 4 or 0.5; got {value!r}")
        return str(value)
    if kind == NAME:
        if not NAME_PATTERN.fullmatch(str(value)):
            raise FlagError(f"{flag} needs a plain name (letters, digits, _ - .); got {value!r}")
        return str(value)
    if kind == PATH:
        text = str(value)
        if not text.startswith("/") or "\x00" in text or "\n" in text:
            raise FlagError(f"{flag} needs an absolute path; got {value!r}")
        return text
    return _json_text(flag, value)


def _json_object(flag: str, value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise FlagError(f"{flag} needs a JSON object; {error}") from error
    if not isinstance(value, dict):
        raise FlagError(f'{flag} needs a JSON object such as {{"key": 1}}; got {value!r}')
    return value


def _json_text(flag: str, value: Any) -> str:
    return json.dumps(_json_object(flag, value), separators=(",", ":"), sort_keys=True)
