"""Errors as OpenAI's API words them, so SDKs raise the exception they would raise against OpenAI:
`{"error": {"message", "type", "param", "code"}}`."""

from django.http import JsonResponse

INVALID_REQUEST = "invalid_request_error"


def error(status: int, message: str, kind: str = INVALID_REQUEST, code: str | None = None, **headers):
    response = JsonResponse(
        {"error": {"message": message, "type": kind, "param": None, "code": code}}, status=status
    )
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


def as_openai_error(body, status: int) -> dict | None:
    """An engine's error body in OpenAI's shape. vLLM answers `{"object": "error", "message", "type",
    "code"}` (older) or `{"error": {...}}` (newer), FastAPI `{"detail": ...}`, its auth `{"error": "..."}`.
    None when `body` already has OpenAI's shape."""
    if not isinstance(body, dict):
        return {"error": {"message": str(body), "type": "server_error", "param": None, "code": status}}
    inner = body.get("error")
    if isinstance(inner, dict) and "message" in inner:
        return None
    message = body.get("message") or body.get("detail") or inner or str(body)
    kind = body.get("type") or (INVALID_REQUEST if status < 500 else "server_error")
    return {"error": {"message": str(message), "type": kind, "param": body.get("param"), "code": status}}
