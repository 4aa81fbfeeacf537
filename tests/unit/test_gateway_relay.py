"""What the gateway reads out of an engine's SSE stream while passing it on: the time to the first generated
token, the usage chunk it asked for (dropped when the client did not), events split across reads."""

import json

from panel.gateway.proxy.errors import as_openai_error
from panel.gateway.proxy.relay import StreamWatch, usage_of


def event(message) -> bytes:
    return b"data: " + (message if isinstance(message, bytes) else json.dumps(message).encode()) + b"\n\n"


ROLE = event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
TOKEN = event({"choices": [{"index": 0, "delta": {"content": "Hi"}}]})
USAGE = event({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8}})
DONE = event(b"[DONE]")


def relayed(watch: StreamWatch, chunks: list[bytes]) -> bytes:
    return b"".join(watch.feed(chunk) for chunk in chunks) + watch.rest()


def test_it_passes_the_stream_unchanged_when_the_client_asked_for_usage():
    watch = StreamWatch(started=0.0, strip_usage=False)
    stream = [ROLE, TOKEN, USAGE, DONE]
    assert relayed(watch, stream) == b"".join(stream)
    assert watch.usage == {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8}
    assert watch.ttft_ms is not None


def test_it_drops_the_usage_chunk_the_client_did_not_ask_for_but_keeps_its_counts():
    watch = StreamWatch(started=0.0, strip_usage=True)
    assert relayed(watch, [ROLE, TOKEN, USAGE, DONE]) == ROLE + TOKEN + DONE
    assert watch.usage["completion_tokens"] == 1


def test_an_event_split_between_reads_goes_out_whole_once_complete():
    watch = StreamWatch(started=0.0, strip_usage=True)
    whole = ROLE + TOKEN + USAGE + DONE
    pieces = [whole[i : i + 7] for i in range(0, len(whole), 7)]
    out = [watch.feed(piece) for piece in pieces]
    assert b"".join(out) + watch.rest() == ROLE + TOKEN + DONE
    assert all(chunk == b"" or chunk.endswith(b"\n\n") for chunk in out)
    assert watch.usage["prompt_tokens"] == 7


def test_the_role_chunk_is_not_the_first_token():
    watch = StreamWatch(started=0.0, strip_usage=False)
    watch.feed(ROLE)
    assert watch.ttft_ms is None
    watch.feed(TOKEN)
    assert watch.ttft_ms is not None


def test_usage_riding_on_a_content_chunk_is_taken_out_of_that_chunk_only():
    both = event({"choices": [{"index": 0, "delta": {"content": "x"}}], "usage": {"completion_tokens": 3}})
    watch = StreamWatch(started=0.0, strip_usage=True)
    out = watch.feed(both)
    assert json.loads(out[len(b"data: ") :]) == {"choices": [{"index": 0, "delta": {"content": "x"}}]}
    assert watch.usage == {"completion_tokens": 3}


def test_a_whole_answers_usage_is_read_and_errors_take_openais_shape():
    assert usage_of(b'{"usage": {"prompt_tokens": 2}}') == {"prompt_tokens": 2}
    assert usage_of(b"not json") is None
    vllm = {"object": "error", "message": "max_tokens too large", "type": "BadRequestError", "code": 400}
    assert as_openai_error(vllm, 400) == {
        "error": {"message": "max_tokens too large", "type": "BadRequestError", "param": None, "code": 400}
    }
    assert as_openai_error({"error": {"message": "x", "type": "y"}}, 400) is None
    assert as_openai_error({"detail": "Not Found"}, 404)["error"]["message"] == "Not Found"
