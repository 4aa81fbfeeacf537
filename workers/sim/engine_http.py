"""HTTP side of the stand-in engine: vLLM's OpenAI-compatible routes, health and metrics.

Standard library only (http.server). Access lines are printed in uvicorn's format, as vLLM's are. Like
uvicorn it speaks HTTP/1.1 with keep-alive (streams in chunked encoding) and has a deep listen backlog, so
a client that keeps connections open (the panel's gateway) or opens many at once sees what vLLM would do.
"""

import argparse
import hashlib
import hmac
import json
import os
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

from workers.sim import engine_kv
from workers.sim.engine_metrics import EngineMetrics
from workers.sim.engine_prefix import PrefixCache, Scheduler, block_hashes, prompt_tokens_of
from workers.sim.engine_sleep import SleepError, SleepMode, dev_mode, parse_sleep_query


class ServedEngine(Protocol):
    """What the handler uses of the engine (workers/sim/engine.py), which imports this module."""

    args: argparse.Namespace
    name: str
    api_key: str
    ready: bool
    metrics: EngineMetrics
    scheduler: Scheduler
    prefix_cache: PrefixCache
    sleep_mode: SleepMode
    kv_config: dict | None
    side_channel: engine_kv.SideChannel | None

    def dies_at_this_request(self) -> bool: ...
    def die(self) -> None: ...
    def set_busy(self, busy: bool) -> None: ...


VLLM_VERSION = "0.9.1"
REPLY_TEXT = (
    "This is a simulated answer from the stand-in engine on the Ascend sim host . It has no model ; "
    "it returns words so that streaming , metrics and logs can be tested end to end ."
)
REPLY_WORDS = REPLY_TEXT.split()
COMPLETION_DEFAULT_MAX_TOKENS = 16  # vLLM's default for /v1/completions
ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."
EMBEDDING_DIMENSIONS = 8


def uvicorn(message: str) -> None:
    print(f"INFO:     {message}", flush=True)


def error_body(status: int, message: str, kind: str) -> dict:
    return {"object": "error", "message": message, "type": kind, "param": None, "code": status}


def count_tokens(text: str) -> int:
    return max(1, len(text.split()))


class Server(ThreadingHTTPServer):
    request_queue_size = 2048  # uvicorn's backlog: a burst of connections queues instead of being dropped
    daemon_threads = True


class Handler(BaseHTTPRequestHandler):
    engine: ServedEngine  # set on the subclass that serve() makes
    server_version = "uvicorn"
    sys_version = ""
    protocol_version = "HTTP/1.1"  # keep-alive; every answer has a length or is chunked
    # TCP_NODELAY, as uvicorn sets it: with Nagle, a stream's small chunks on a kept-alive connection wait
    # for the client's delayed ACK (up to 40 ms), which vLLM's streams never do.
    disable_nagle_algorithm = True

    def log_message(self, format, *args):
        pass  # access lines are printed by log_request in uvicorn's format

    def log_request(self, code="-", size="-"):
        phrase = self.responses.get(int(code), ("",))[0] if str(code).isdigit() else ""
        host, port = self.client_address[:2]
        uvicorn(f'{host}:{port} - "{self.command} {self.path} {self.request_version}" {code} {phrase}')

    # --- plumbing --------------------------------------------------------------------------------

    def send_json(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_text(self, status: int, text: str, content_type: str = "text/plain; charset=utf-8") -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def not_ready(self) -> bool:
        if self.engine.ready:
            return False
        self.send_json(503, error_body(503, "The engine is still starting.", "ServiceUnavailableError"))
        return True

    def unauthorized(self, path: str) -> bool:
        """vLLM with --api-key (or VLLM_API_KEY) wants `Authorization: Bearer <key>` on /v1/* only; /health,
        /metrics and the rest stay open. Its refusal is this body, status 401."""
        key = self.engine.api_key
        if not key or not path.startswith("/v1"):
            return False
        given = self.headers.get("Authorization", "")
        if hmac.compare_digest(given.encode(), f"Bearer {key}".encode()):
            return False
        self.send_json(401, {"error": "Unauthorized"})
        return True

    # --- routes ----------------------------------------------------------------------------------

    def do_GET(self):
        if self.not_ready():
            return
        path = self.path.split("?", 1)[0]
        if self.unauthorized(path):
            return
        if path in ("/health", "/ping"):
            self.send_text(200, "")
        elif path == "/version":
            self.send_json(200, {"version": VLLM_VERSION})
        elif path == "/v1/models":
            self.send_json(200, self.models())
        elif path == "/metrics":
            self.send_text(200, self.engine.metrics.render(), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/is_sleeping" and dev_mode():
            self.send_json(200, {"is_sleeping": self.engine.sleep_mode.is_sleeping()})
        else:
            self.send_json(404, {"detail": "Not Found"})

    def do_POST(self):
        # The body is read whatever the answer: on a kept-alive connection it would be taken for the next
        # request.
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.not_ready():
            return
        path = self.path.split("?", 1)[0]
        if self.unauthorized(path):
            return
        if path == "/ping":
            self.send_text(200, "")
            return
        if path in ("/sleep", "/wake_up") and dev_mode():
            self.sleep_route(path, self.path.partition("?")[2])
            return
        if path not in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings"):
            self.send_json(404, {"detail": "Not Found"})
            return
        try:
            body = json.loads(raw or b"{}")
        except (ValueError, json.JSONDecodeError) as error:
            self.send_json(
                400, error_body(400, f"Request body is not valid JSON: {error}", "BadRequestError")
            )
            return
        problem = self.validate(path, body)
        if problem:
            self.send_json(*problem)
            return
        if path == "/v1/embeddings":
            self.send_json(200, self.embeddings(body))
            return
        if self.engine.dies_at_this_request():
            self.send_json(500, error_body(500, ENGINE_DEAD_MESSAGE, "InternalServerError"))
            self.engine.die()  # after the answer is written: the shutdown it starts ends the process
            return
        self.complete(path == "/v1/chat/completions", body)

    def sleep_route(self, path: str, query: str) -> None:
        sleep_mode = self.engine.sleep_mode
        try:
            if path == "/sleep":
                self.send_json(200, sleep_mode.sleep(*parse_sleep_query(query)))
            else:
                self.send_json(200, sleep_mode.wake_up(query))
        except SleepError as error:
            self.send_json(error.status, error.body)

    def models(self) -> dict:
        args = self.engine.args
        created = int(time.time())
        return {
            "object": "list",
            "data": [
                {
                    "id": name,
                    "object": "model",
                    "created": created,
                    "owned_by": "vllm",
                    "root": args.model,
                    "parent": None,
                    "max_model_len": args.max_model_len,
                    "permission": [],
                }
                for name in args.served_model_name
            ],
        }

    def validate(self, path: str, body: dict) -> tuple[int, dict] | None:
        model = body.get("model")
        if model is not None and model not in self.engine.args.served_model_name:
            message = f"The model `{model}` does not exist."
            return 404, error_body(404, message, "NotFoundError")
        if path == "/v1/chat/completions" and not isinstance(body.get("messages"), list):
            return 400, error_body(400, "'messages' must be a list of {role, content}", "BadRequestError")
        if path == "/v1/completions" and not isinstance(body.get("prompt"), str | list):
            return 400, error_body(400, "'prompt' is required", "BadRequestError")
        if path == "/v1/embeddings" and not isinstance(body.get("input"), str | list):
            return 400, error_body(400, "'input' is required", "BadRequestError")
        return None

    def embeddings(self, body: dict) -> dict:
        """A fixed-size vector per input, the same for the same text (from its hash): no model, but the
        shape, the order and the usage of vLLM's /v1/embeddings."""
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = []
        for index, text in enumerate(texts):
            digest = hashlib.sha256(str(text).encode()).digest()
            vector = [round(byte / 255 - 0.5, 4) for byte in digest[:EMBEDDING_DIMENSIONS]]
            data.append({"index": index, "object": "embedding", "embedding": vector})
        tokens = sum(count_tokens(str(text)) for text in texts)
        return {
            "id": "embd-" + uuid.uuid4().hex,
            "object": "list",
            "created": int(time.time()),
            "model": self.engine.name,
            "data": data,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0},
        }

    def complete(self, chat: bool, body: dict) -> None:
        engine = self.engine
        tokens = prompt_tokens_of(chat, body)
        default = len(REPLY_WORDS) if chat else COMPLETION_DEFAULT_MAX_TOKENS
        limit = int(body.get("max_completion_tokens") or body.get("max_tokens") or default)
        if body.get("ignore_eos"):
            # As vLLM's ignore_eos: generate max_tokens whatever the text (benchmarks want equal lengths).
            words = [REPLY_WORDS[i % len(REPLY_WORDS)] for i in range(limit)]
        else:
            words = REPLY_WORDS[:limit]
        request = Request(
            chat, body, ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex, words, len(tokens)
        )
        request.finish_reason = "length" if body.get("ignore_eos") or limit < len(REPLY_WORDS) else "stop"

        request.epoch = engine.scheduler.admit()  # waits while max_num_seqs run or the engine sleeps
        try:
            cached = engine.prefix_cache.schedule(tokens)
            engine.metrics.start_request(len(tokens), cached)
            engine.set_busy(True)
            try:
                pulled = engine_kv.pull(engine.kv_config, body)
            except engine_kv.TransferError as error:
                request.finish_reason = "error"  # vLLM's kv_load_failure_policy "fail"
                self.send_json(500, error_body(500, str(error), "InternalServerError"))
                return
            self.prefill(len(tokens) - cached, pulled)
            self.answer(request, tokens)
        finally:
            engine.scheduler.release()
            engine.metrics.finish_request(
                request.prompt_tokens + request.generated,
                request.finish_reason,
                time.monotonic() - request.started,
            )
            if engine.metrics.running == 0:
                engine.set_busy(False)

    def prefill(self, uncached_tokens: int, pulled: tuple[list[bytes], int] | None) -> None:
        """The prompt's compute before the first token: only what the prefix cache lacks, or, for a decode
        whose prefill ran elsewhere, only the transfer (the real call that pulled it, and a copy time per
        token, SIM_ENGINE_KV_TOKEN_DELAY)."""
        if pulled is not None:
            hashes, num_tokens = pulled
            self.engine.prefix_cache.insert(hashes)
            time.sleep(num_tokens * float(os.environ.get("SIM_ENGINE_KV_TOKEN_DELAY", "0.00001")))
            return
        time.sleep(uncached_tokens * float(os.environ.get("SIM_ENGINE_PREFILL_TOKEN_DELAY", "0.0002")))

    def answer(self, request: "Request", tokens: list[str]) -> None:
        if request.body.get("stream"):
            self.stream(request)
            return
        text = "".join(self.generate(request))
        engine = self.engine
        if engine_kv.wants_remote_decode(request.body) and engine.side_channel:
            # A prefill for a remote decode: keep the prompt's blocks for it and say where they are.
            hashes = block_hashes(tokens, engine.prefix_cache.block_size)
            request.kv_transfer_params = engine.side_channel.offer(request.id, hashes, len(tokens))
        self.send_json(200, self.full_response(request, text))

    def generate(self, request: "Request"):
        """The words, one per token delay, stopping early when a sleep aborts the request."""
        token_delay = float(os.environ.get("SIM_ENGINE_TOKEN_DELAY", "0.01"))
        last = None
        for word in request.words:
            time.sleep(token_delay)
            if self.engine.scheduler.aborted(request.epoch):
                request.finish_reason = "abort"
                return
            now = time.monotonic()
            if last is None:
                self.engine.metrics.first_token(now - request.started)
            self.engine.metrics.token_generated(None if last is None else now - last)
            last = now
            request.generated += 1
            yield word if request.generated == 1 else " " + word

    def full_response(self, request: "Request", text: str) -> dict:
        common = {
            "id": request.id,
            "created": int(time.time()),
            "model": self.engine.name,
            "usage": request.usage(),
            "kv_transfer_params": request.kv_transfer_params,
        }
        choice: dict = {"index": 0, "logprobs": None, "finish_reason": request.finish_reason}
        if request.chat:
            choice["message"] = {"role": "assistant", "content": text, "tool_calls": []}
            return {**common, "object": "chat.completion", "choices": [choice]}
        choice.update(text=text, stop_reason=None)
        return {**common, "object": "text_completion", "choices": [choice]}

    def stream(self, request: "Request") -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        created = int(time.time())
        kind = "chat.completion.chunk" if request.chat else "text_completion"

        def write(data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def send(finish_reason: str | None = None, piece: str | None = None, **extra) -> None:
            chunk = {"id": request.id, "object": kind, "created": created, "model": self.engine.name}
            choice: dict = {"index": 0, "logprobs": None, "finish_reason": finish_reason}
            if request.chat and finish_reason:
                choice["delta"] = {}
            elif request.chat:
                choice["delta"] = (
                    {"role": "assistant", "content": ""} if piece is None else {"content": piece}
                )
            else:
                choice["text"] = piece or ""
                if finish_reason:
                    choice["stop_reason"] = None
            chunk.update(choices=[] if extra else [choice], **extra)
            write(f"data: {json.dumps(chunk)}\n\n".encode())

        if request.chat:
            send()
        for piece in self.generate(request):
            send(piece=piece)
        send(finish_reason=request.finish_reason)
        if (request.body.get("stream_options") or {}).get("include_usage"):
            send(usage=request.usage())
        write(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class Request:
    """One completion request as the engine runs it."""

    def __init__(self, chat: bool, body: dict, request_id: str, words: list[str], prompt_tokens: int):
        self.chat, self.body, self.id, self.words = chat, body, request_id, words
        self.prompt_tokens = prompt_tokens
        self.started = time.monotonic()  # TTFT counts the wait for a running slot, as vLLM's does
        self.epoch = 0
        self.generated = 0
        self.finish_reason = "stop"
        self.kv_transfer_params: dict | None = None

    def usage(self) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.generated,
            "total_tokens": self.prompt_tokens + self.generated,
        }
