"""`chat NAME PROMPT`: one question to a running deployment through the panel's playground endpoint
(POST /api/v1/deployments/{id}/chat/, an OpenAI chat-completions body passed on to the engine)."""

import json
import sys

import httpx

from panel.cli import output
from panel.cli.client import ApiError, connect
from panel.cli.commands import add_command, name_argument
from panel.cli.errors import CliError

ENGINE_TIMEOUT_S = 600.0  # the panel waits as long for the engine

EPILOG = """\
examples:
  ascend-panel chat qwen-chat "Say hello"
  echo "Summarise this" | ascend-panel chat qwen-chat - --max-tokens 200 --stream
  ascend-panel chat qwen-chat "Say hello" -o json | jq .usage

Needs the operator role; the deployment must be running (else exit 1)."""


def register(commands) -> None:
    parser = add_command(commands, "chat", "ask a running deployment one question", epilog=EPILOG)
    name_argument(parser)
    parser.add_argument("prompt", metavar="PROMPT", help="the question; - reads it from stdin")
    parser.add_argument("--system", help="a system message before the question")
    parser.add_argument("--max-tokens", type=int, metavar="N", help="at most N tokens in the answer")
    parser.add_argument("--temperature", type=float)
    parser.add_argument("--stream", action="store_true", help="print the answer as it is generated")
    parser.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        default="text",
        help="the answer's text, or the whole JSON",
    )
    parser.set_defaults(run=chat_command)


def chat_body(args, prompt: str) -> dict:
    messages = [{"role": "system", "content": args.system}] if args.system else []
    body = {"messages": [*messages, {"role": "user", "content": prompt}], "stream": bool(args.stream)}
    if args.max_tokens is not None:
        body["max_tokens"] = args.max_tokens
    if args.temperature is not None:
        body["temperature"] = args.temperature
    return body


def chat_command(args) -> int:
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    body = chat_body(args, prompt)
    with connect() as client:
        deployment = client.deployment(args.name)
        path = f"/deployments/{deployment['id']}/chat/"
        if args.stream:
            return _stream(client, path, body, args.output)
        answer = client.request("POST", path, json=body, timeout=ENGINE_TIMEOUT_S).json()
    if args.output == "json":
        print(output.to_json(answer))
    else:
        print(_text(answer))
    return 0


def _text(answer: dict) -> str:
    try:
        return answer["choices"][0]["message"]["content"] or ""
    except (KeyError, IndexError, TypeError):
        raise CliError(f"The engine's answer has no message: {json.dumps(answer)[:300]}") from None


def _stream(client, path: str, body: dict, fmt: str) -> int:
    """The engine's SSE chunks as they come: each delta's text (or each chunk's JSON, one per line)."""
    timeout = httpx.Timeout(ENGINE_TIMEOUT_S, connect=10.0)
    try:
        with client.http.stream("POST", path, json=body, timeout=timeout) as response:
            if response.status_code >= 400:
                response.read()
                raise ApiError.from_response(response)
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if fmt == "json":
                    print(json.dumps(chunk, ensure_ascii=False), flush=True)
                    continue
                for choice in chunk.get("choices") or []:
                    sys.stdout.write((choice.get("delta") or {}).get("content") or "")
                    sys.stdout.flush()
    except httpx.HTTPError as error:
        raise CliError(f"The answer stopped: {error}") from None
    if fmt == "text":
        print()
    return 0
