"""`get deployments -w`: the deployments (or one) as they change, over the panel's `?watch=true` event stream
(docs/api-streams.md), polling every POLL_S on a panel without one. Each change is handed on once: the
stream sends every object again after a reconnect, and only fields worth an event are compared."""

import json
import time
from collections.abc import Callable

import httpx

from panel.cli import output
from panel.cli.client import ApiError, Client, Resume, WatchUnsupported, connect
from panel.cli.waiting import POLL_S, SILENCE_S

# What the panel's own watch leaves out of its comparison (panel.deployments.api.views): live engine figures.
VOLATILE = ("metrics", "metrics_at", "updated")
# Table columns that change by themselves (an age ticks): a line for that alone would reprint every row.
VOLATILE_COLUMNS = ("AGE",)
DELETED = "deleted"


class Changes:
    """Which deployments were last seen how: `seen(data)` is True when `data` differs from the last one
    of its name in a field worth showing."""

    def __init__(self):
        self.last: dict[str, dict] = {}

    def seen(self, data: dict) -> bool:
        compared = {key: value for key, value in data.items() if key not in VOLATILE}
        name = str(data.get("name"))
        if self.last.get(name) == compared:
            return False
        self.last[name] = compared
        return True

    def gone(self, name: str) -> dict | None:
        """The last state of a deployment that went, with status `deleted`; None when it was not seen."""
        last = self.last.pop(name, None)
        return None if last is None else {**last, "status": DELETED}


def follow(client: Client, deployment: dict | None, show: Callable[[dict], None]) -> None:
    """Hand each change of `deployment` (of every deployment the user may see, when None) to `show`, a
    deployment that went with status `deleted`. Returns once the one deployment followed is gone; otherwise
    until interrupted. ApiError / CliError end it (a revoked token, a panel that went away)."""
    path = "/deployments/" if deployment is None else f"/deployments/{deployment['id']}/"
    changes = Changes()
    resume = Resume()  # a reconnect asks for what changed since the last event read, not everything again
    while True:
        try:
            for event, data in client.events(path, read_timeout=SILENCE_S, resume=resume):
                if event == "deployment" and changes.seen(data):
                    show(data)
                elif event == DELETED and _report_gone(changes, data.get("name"), show, deployment):
                    return
            continue  # the panel ended the stream (a restart, a resync that failed): watch again
        except httpx.TimeoutException:
            continue  # not even a keepalive: the connection is dead; watch again
        except WatchUnsupported:
            break
        except ApiError as error:
            if error.status == 404 and deployment is not None:
                _report_gone(changes, deployment["name"], show, deployment)
                return
            raise
    _poll(client, path, deployment, changes, show)


def _report_gone(changes: Changes, name, show, deployment: dict | None) -> bool:
    """Show that `name` went; True when it was the one deployment followed (the watch is over)."""
    last = changes.gone(name) or (
        {**deployment, "status": DELETED} if deployment and deployment["name"] == name else None
    )
    if last is not None:
        show(last)
    return deployment is not None and deployment["name"] == name


def _poll(client: Client, path: str, deployment: dict | None, changes: Changes, show) -> None:
    """The same, from the plain API every POLL_S: an older panel, or one behind a proxy that buffers."""
    while True:
        try:
            found = list(client.pages(path))
        except ApiError as error:
            if error.status == 404 and deployment is not None:
                _report_gone(changes, deployment["name"], show, deployment)
                return
            raise
        for data in found:
            if changes.seen(data):
                show(data)
        there = {data.get("name") for data in found}
        for name in [name for name in changes.last if name not in there]:
            _report_gone(changes, name, show, None)
        time.sleep(POLL_S)


def watch(name: str | None, show: Callable[[dict], None]) -> int:
    """`get -w [NAME]`: follow until Ctrl-C (exit 0) or until NAME is gone."""
    try:
        with connect() as client:
            follow(client, client.deployment(name) if name is not None else None, show)
    except KeyboardInterrupt:
        pass
    return 0


def printer(fmt: str, headers: list[str], row_of: Callable[[dict], list]) -> Callable[[dict], None]:
    """What prints one change as `fmt`: a table row (the header first), one line of JSON (JSON Lines), a
    YAML document, a jsonpath line or the name. Flushed: a pipe sees each change as it comes."""
    table = WatchTable(headers)

    def show(deployment: dict) -> None:
        if fmt == "table":
            line = table.line(row_of(deployment))
            if line is None:
                return  # nothing its line shows changed
        elif fmt == "json":
            line = json.dumps(deployment, ensure_ascii=False, separators=(",", ":"))
        elif fmt == "yaml":
            line = "---\n" + output.to_yaml(deployment)
        else:
            line = output.render(deployment, fmt, names=[deployment["name"]])
        print(line, flush=True)

    return show


class WatchTable:
    """Table lines printed one at a time: the header before the first, each column as wide as the widest
    cell so far (a watch cannot know the widths ahead; neither can kubectl's), a row only when it reads
    differently from its last line."""

    def __init__(self, headers: list[str]):
        self.headers = headers
        self.widths = [len(header) for header in headers]
        self.started = False
        self.shown: dict[str, list[str]] = {}  # by the row's first cell (its name): what its last line said

    def line(self, row: list) -> str | None:
        """The row's line, with the header before the first; None when the row reads as its last line did
        (but for columns that change by themselves)."""
        cells = ["" if cell is None else str(cell) for cell in row]
        steady = [
            cell for cell, header in zip(cells, self.headers, strict=True) if header not in VOLATILE_COLUMNS
        ]
        if self.shown.get(cells[0]) == steady:
            return None
        self.shown[cells[0]] = steady
        self.widths = [max(width, len(cell)) for width, cell in zip(self.widths, cells, strict=True)]
        lines = [] if self.started else [self._format(self.headers)]
        self.started = True
        return "\n".join([*lines, self._format(cells)])

    def _format(self, cells: list[str]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, self.widths, strict=True)).rstrip()
