"""The panel's REST API over httpx: a bearer token, JSON, one error type carrying the API's answer,
pagination, Server-Sent Events and lookups by name."""

import json
import os
from collections.abc import Iterator
from importlib import metadata
from urllib.parse import parse_qsl, quote, urlsplit

import httpx

from panel.cli import config
from panel.cli.errors import FAILED, TIMEOUT, CliError

DEFAULT_TIMEOUT = 30.0
WAIT_MARGIN_S = 30.0  # a server-side wait answers after its own timeout; the read allows for that much more
KEEPALIVE = "keepalive"  # the pseudo-event events() yields for each keepalive comment of the stream


def version() -> str:
    try:
        return metadata.version("ascend-panel")
    except metadata.PackageNotFoundError:
        return "dev"


def _language(environ=os.environ) -> str:
    """The API answers in the reader's language: zh-hans for a Chinese locale, else English."""
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = environ.get(name)
        if value:
            return "zh-hans" if value.lower().startswith("zh") else "en"
    return "en"


class ApiError(CliError):
    """The API answered an error: its status and JSON body (detail, errors, and for a failed wait the
    deployment, findings and log_tail). 408, a wait that ran out of time, exits 3; the rest exit 1."""

    def __init__(self, status: int, body: dict, url: str):
        detail = str(body.get("detail") or f"HTTP {status} from {url}")
        super().__init__(detail, TIMEOUT if status == 408 else FAILED)
        self.status = status
        self.body = body

    @classmethod
    def from_response(cls, response: httpx.Response) -> "ApiError":
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            # Not the panel's JSON (a proxy's HTML page, say): its first line is still worth showing.
            text = response.text.strip().splitlines()
            reason = response.reason_phrase or ""
            detail = f"HTTP {response.status_code} {reason}".strip() + (f": {text[0][:200]}" if text else "")
            body = {"detail": detail}
        if "detail" not in body:
            # The engine's own error, passed on by the chat endpoint: vLLM's {"message"} or OpenAI's
            # {"error": {"message"}}.
            inner = body.get("error")
            message = body.get("message") or (inner.get("message") if isinstance(inner, dict) else inner)
            if message:
                body = {**body, "detail": str(message)}
        return cls(response.status_code, body, str(response.request.url))


class Unreachable(CliError):
    """The panel could not be reached, or did not answer in time: a request after it would fare no better."""


class WatchUnsupported(Exception):  # a signal to fall back, not an error
    """The panel answered `?watch=true` with something other than an event stream: poll instead."""

    def __init__(self, response: httpx.Response):
        super().__init__(response.status_code)
        self.response = response


class Resume:
    """Where a watch was: the id of the last event read (SSE's `Last-Event-ID`), across reconnects."""

    def __init__(self):
        self.last_event_id = ""


class Client:
    def __init__(self, url: str, token: str = "", timeout: float = DEFAULT_TIMEOUT):
        headers = {
            "Accept": "application/json",
            "User-Agent": f"ascend-panel-cli/{version()}",
            "Accept-Language": _language(),
        }
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.url = url
        self.http = httpx.Client(base_url=f"{url}/api/v1", headers=headers, timeout=timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.http.close()

    def request(self, method: str, path: str, *, timeout: float | None = None, **kwargs) -> httpx.Response:
        """The answer of a 2xx; ApiError for an error answer; CliError when the panel cannot be reached."""
        if timeout is not None:
            kwargs["timeout"] = httpx.Timeout(timeout, connect=10.0)
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.TimeoutException:
            raise Unreachable(f"The panel at {self.url} did not answer in time ({method} {path}).") from None
        except httpx.HTTPError as error:
            raise Unreachable(f"Cannot reach the panel at {self.url}: {error}") from None
        if response.status_code >= 400:
            raise ApiError.from_response(response)
        return response

    def get(self, path: str, **params) -> dict:
        return self.request("GET", path, params=params or None).json()

    def pages(self, path: str, **params) -> Iterator[dict]:
        """Every item of a paginated list, following `next` (its query only: behind a proxy the panel may
        not know the address it is reached at)."""
        while True:
            page = self.get(path, **params)
            if not isinstance(page, dict) or "results" not in page:
                yield from page if isinstance(page, list) else [page]
                return
            yield from page["results"]
            if not page.get("next"):
                return
            params = dict(parse_qsl(urlsplit(page["next"]).query))

    def events(
        self, path: str, read_timeout: float, resume: Resume | None = None, **params
    ) -> Iterator[tuple[str, dict]]:
        """(event, data) of a Server-Sent Events stream (`?watch=true`), and (KEEPALIVE, {}) for each of its
        keepalives. WatchUnsupported when the panel answers otherwise; httpx.ReadTimeout when nothing (not
        even a keepalive) came for read_timeout. With `resume`, the stream is asked to go on after the last
        event it names (`Last-Event-ID`), and the id of each event read is kept in it for the next call."""
        headers = {"Accept": "text/event-stream"}
        if resume is not None and resume.last_event_id:
            headers["Last-Event-ID"] = resume.last_event_id
        timeout = httpx.Timeout(read_timeout, connect=10.0)
        try:
            with self.http.stream(
                "GET", path, params={**params, "watch": "true"}, headers=headers, timeout=timeout
            ) as response:
                kind = response.headers.get("content-type", "")
                if response.status_code >= 400 or not kind.startswith("text/event-stream"):
                    response.read()
                    if response.status_code == 404:
                        raise ApiError.from_response(response)
                    raise WatchUnsupported(response)
                yield from _parse_events(response.iter_lines(), resume)
        except (httpx.TimeoutException, WatchUnsupported, ApiError):
            raise  # the caller's to handle: a silent stream to reconnect, a panel to poll, a deployment gone
        except httpx.HTTPError as error:
            raise Unreachable(f"Cannot reach the panel at {self.url}: {error}") from None

    def find_deployment(self, name: str) -> dict | None:
        """The deployment named `name` (a number is an id), or None. Found through the list's search
        filter, which every version of the API has; the exact name decides."""
        if name.isdigit():
            try:
                return self.get(f"/deployments/{name}/")
            except ApiError as error:
                if error.status == 404:
                    return None
                raise
        return next((d for d in self.pages("/deployments/", search=name) if d.get("name") == name), None)

    def deployment(self, name: str) -> dict:
        found = self.find_deployment(name)
        if found is None:
            raise CliError(f"No deployment named {name!r}.")
        return found


def _parse_events(lines: Iterator[str], resume: Resume | None = None) -> Iterator[tuple[str, dict]]:
    event, event_id = "message", ""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                text = "\n".join(data)
                try:
                    parsed = json.loads(text)
                except ValueError:
                    parsed = {"text": text}
                if resume is not None and event_id:
                    resume.last_event_id = event_id  # before the yield: the caller may stop at it
                yield event, parsed
            event, data, event_id = "message", [], ""
        elif line.startswith(":"):
            # The keepalive comment: handed on, so that a caller waiting on a quiet stream sees its deadline
            # pass (the keepalives keep the read timeout from ever firing).
            yield KEEPALIVE, {}
        else:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                event = value
            elif field == "id":
                event_id = value
            elif field == "data":
                data.append(value)


def path_of(name: str) -> str:
    """A name as one path segment of a URL."""
    return quote(name, safe="")


def connect() -> Client:
    """A client for the panel the user signed in to (config.py), or a UsageError saying how to sign in."""
    settings = config.load()
    return Client(settings.url, settings.token)
