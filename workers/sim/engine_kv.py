"""Disaggregated prefill/decode in the stand-in engine, as vLLM's KV connectors play it.

`--kv-transfer-config '<json>'` is read as vLLM reads it (vllm/config/kv_transfer.py): unknown fields
refused, `kv_role` one of kv_producer | kv_consumer | kv_both and required with a connector, `engine_id` a
fresh uuid when not given, `kv_port` 14579 by default.

A producer answering a request whose `kv_transfer_params` say `do_remote_decode` keeps the prompt's blocks
under the request's id for a bounded time and answers, in its non-streamed answer where vLLM's proxies read
them, the params a decode needs, named as vLLM's NIXL connector names them (`do_remote_prefill`,
`remote_engine_id`, `remote_request_id`, `remote_block_ids`, `remote_host`, `remote_port`, …). It serves
those blocks on a side channel, a small HTTP server on `kv_port`. A consumer given `do_remote_prefill`
params pulls them from `remote_host:remote_port` over a real TCP call before its first token; a prefill it
cannot reach, or one that has no such request, fails the request, as vLLM's default
`kv_load_failure_policy: fail` does.
"""

import json
import os
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")
FIELDS = {
    "kv_connector": (str, type(None)),
    "engine_id": (str, type(None)),
    "kv_buffer_device": (str,),
    "kv_role": (str, type(None)),
    "kv_port": (int,),
    "kv_connector_extra_config": (dict,),
    "kv_connector_module_path": (str, type(None)),
    "enable_permute_local_kv": (bool,),
    "kv_load_failure_policy": (str,),
}
# vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT / VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT: a prefill frees blocks no
# decode came for after this many seconds.
DEFAULT_KEEP_S = 480.0
# How often the sim engine's HTTP servers (its API and this side channel) look for a stop: shutdown() waits
# for the next look, and at serve_forever's default 0.5 s every engine stopped took half a second longer.
SHUTDOWN_POLL_S = 0.05


class KVConfigError(ValueError):
    pass


class TransferError(Exception):
    pass


def parse_config(text: str | None) -> dict | None:
    if not text:
        return None
    try:
        config = json.loads(text)
    except ValueError as error:
        raise KVConfigError(f"--kv-transfer-config is not valid JSON: {error}") from error
    if not isinstance(config, dict):
        raise KVConfigError("--kv-transfer-config must be a JSON object")
    for name, value in config.items():
        if name not in FIELDS:
            raise KVConfigError(f"KVTransferConfig: extra inputs are not permitted: {name!r}")
        if not isinstance(value, FIELDS[name]) or (isinstance(value, bool) and FIELDS[name] == (int,)):
            raise KVConfigError(f"KVTransferConfig: {name!r} has the wrong type: {value!r}")
    role = config.get("kv_role")
    if role is not None and role not in KV_ROLES:
        raise KVConfigError(f"Unsupported kv_role: {role}. Supported roles are {KV_ROLES}")
    if config.get("kv_connector") is not None and role is None:
        raise KVConfigError(
            f"Please specify kv_role when kv_connector is set, supported roles are {KV_ROLES}"
        )
    return {
        "kv_connector_extra_config": {},
        "kv_port": 14579,
        **config,
        "engine_id": config.get("engine_id") or str(uuid.uuid4()),
    }


def is_producer(config: dict | None) -> bool:
    return bool(config and config.get("kv_connector") and config["kv_role"] in ("kv_producer", "kv_both"))


def is_consumer(config: dict | None) -> bool:
    return bool(config and config.get("kv_connector") and config["kv_role"] in ("kv_consumer", "kv_both"))


class KVStore:
    """The prefill side's finished prompts, each kept until its decode takes it or its time runs out."""

    def __init__(self, keep_s: float):
        self.keep_s = keep_s
        self.entries: dict[str, tuple[float, dict]] = {}
        self.lock = threading.Lock()

    def put(self, request_id: str, entry: dict) -> None:
        with self.lock:
            self._expire()
            self.entries[request_id] = (time.monotonic() + self.keep_s, entry)

    def take(self, request_id: str) -> dict | None:
        with self.lock:
            self._expire()
            kept = self.entries.pop(request_id, None)
        return kept[1] if kept else None

    def _expire(self) -> None:
        now = time.monotonic()
        for request_id in [key for key, (until, _) in self.entries.items() if until < now]:
            del self.entries[request_id]


class SideChannel:
    """The producer's KV side channel: GET /kv/<request id> hands over (and frees) a kept prompt."""

    def __init__(self, config: dict, host: str, tp_size: int):
        self.config = config
        self.tp_size = tp_size
        self.store = KVStore(float(os.environ.get("SIM_ENGINE_KV_KEEP_S", DEFAULT_KEEP_S)))
        self.host = advertised_host(host)
        store, engine_id = self.store, self.config["engine_id"]

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format, *args):
                pass

            def do_GET(self):
                request_id = self.path.split("?", 1)[0].removeprefix("/kv/")
                entry = store.take(request_id)
                status = 200 if entry else 404
                body = {**entry, "engine_id": engine_id} if entry else {"detail": "no such request"}
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer((host, self.config["kv_port"]), Handler)
        self.server.daemon_threads = True
        threading.Thread(
            target=self.server.serve_forever, args=(SHUTDOWN_POLL_S,), name="kv-side-channel", daemon=True
        ).start()

    def offer(self, request_id: str, hashes: list[bytes], num_tokens: int) -> dict:
        """Keep a finished prefill's blocks; returns the kv_transfer_params its decode is to be given."""
        self.store.put(request_id, {"block_hashes": [h.hex() for h in hashes], "num_tokens": num_tokens})
        return {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_block_ids": list(range(len(hashes))),
            "remote_engine_id": self.config["engine_id"],
            "remote_request_id": request_id,
            "remote_host": self.host,
            "remote_port": self.config["kv_port"],
            "tp_size": self.tp_size,
            "remote_num_tokens": num_tokens,
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def advertised_host(host: str) -> str:
    if host not in ("", "0.0.0.0", "::"):  # noqa: S104 - comparing, not binding
        return host
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def wants_remote_decode(body: dict) -> bool:
    params = body.get("kv_transfer_params")
    return isinstance(params, dict) and params.get("do_remote_decode") is True


def pull(config: dict | None, body: dict) -> tuple[list[bytes], int] | None:
    """On a consumer, the blocks and token count a `do_remote_prefill` request's prefill computed, fetched
    from the prefill engine; None when the request is not a remote-prefill one (or this engine no
    consumer, which, as vLLM without a connector, computes the prompt itself)."""
    params = body.get("kv_transfer_params")
    if not is_consumer(config) or not isinstance(params, dict):
        return None
    if params.get("do_remote_prefill") is not True:
        return None
    host, port = params.get("remote_host"), params.get("remote_port")
    request_id, engine_id = params.get("remote_request_id"), params.get("remote_engine_id")
    where = f"remote engine {engine_id} at {host}:{port}"
    if not (isinstance(host, str) and isinstance(port, int) and isinstance(request_id, str)):
        raise TransferError(
            "KV load failed: kv_transfer_params need remote_host, remote_port and remote_request_id"
        )
    url = f"http://{host}:{port}/kv/{request_id}"
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:  # http to the prefill the params name
            entry = json.loads(answer.read())
    except urllib.error.HTTPError as error:
        raise TransferError(f"KV load failed: {where} holds no blocks for request {request_id}") from error
    except (OSError, ValueError) as error:
        raise TransferError(f"KV load failed: cannot reach {where}: {error}") from error
    if engine_id is not None and entry.get("engine_id") != engine_id:
        raise TransferError(
            f"KV load failed: {host}:{port} is engine {entry.get('engine_id')}, not {engine_id}"
        )
    return [bytes.fromhex(h) for h in entry["block_hashes"]], int(entry["num_tokens"])
