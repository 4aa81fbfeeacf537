"""Where the CLI finds its panel: `login` stores URL and token in the user's config directory
($XDG_CONFIG_HOME/ascend-panel/config.yaml, else ~/.config/…), readable by the user only (0600), as a
context: one named panel among several, as kubectl keeps clusters. The current context is the one used;
`--context NAME` (or ASCEND_PANEL_CONTEXT) picks another for one command. ASCEND_PANEL_URL and
ASCEND_PANEL_TOKEN override the context's values (what a CI job sets instead of logging in).

    current-context: prod
    contexts:
      prod: {url: https://panel.example.com, token: ap_…, username: alice}
      lab: {url: http://10.0.0.5:8000, token: ap_…}

A file of the single-panel days (`url`, `token`, `username` at the top) reads as the context `default`, and
is written in this shape the next time the CLI writes it."""

import contextlib
import os
import re
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from panel.cli.errors import UsageError

URL_ENV = "ASCEND_PANEL_URL"
TOKEN_ENV = "ASCEND_PANEL_TOKEN"  # noqa: S105 (the variable's name, not a token)
CONTEXT_ENV = "ASCEND_PANEL_CONTEXT"
DEFAULT_CONTEXT = "default"
CONTEXT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,62}")
CONTEXT_RULE = "1 to 63 letters, digits, '.', '_', ':', '@' and '-', starting with a letter or digit"

_chosen_context: str | None = None  # the global --context of this run (main sets it)


@dataclass(frozen=True)
class Settings:
    url: str
    token: str
    source: str  # where they came from, for messages: the file's path or the variables
    context: str = ""  # the context they came from ("" when the variables give both)


@dataclass
class Contexts:
    """The file's contents: each context's url, token and username, and which one is current."""

    path: Path
    current: str = ""
    entries: dict[str, dict] = field(default_factory=dict)

    def save(self) -> None:
        entries = {name: dict(entry) for name, entry in self.entries.items()}
        write_file(self.path, {"current-context": self.current, "contexts": entries})


def choose_context(name: str | None) -> None:
    """The context this run uses instead of the current one (`--context NAME`); None: the usual one."""
    global _chosen_context
    _chosen_context = name


def check_context_name(name: str) -> str:
    if not CONTEXT_NAME.fullmatch(name):
        raise UsageError(f"{name!r} is not a context name: {CONTEXT_RULE}.")
    return name


def config_path(environ=os.environ) -> Path:
    base = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".config")
    return Path(base) / "ascend-panel" / "config.yaml"


def normalise_url(url: str) -> str:
    """http(s)://host[:port][/prefix] without a trailing slash; a pasted …/api/v1 is dropped."""
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"The panel's URL must start with http:// or https://, not {url!r}.")
    if parts.query or parts.fragment:
        raise UsageError(f"The panel's URL must have no query or fragment: {url!r}.")
    for suffix in ("/api/v1", "/api"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
    return url


def read_file(path: Path) -> dict:
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return {}  # never signed in here; the environment may still name the panel and the token
    except OSError as error:
        raise UsageError(f"Cannot read {path}: {error}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        # As ssh does for keys: others can read the token. Say so, but keep working.
        print(f"warning: {path} is readable by others; run chmod 600 {path}", file=sys.stderr)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as error:
        raise UsageError(f"Cannot read {path}: {error}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} is not a mapping of url and token; run ascend-panel login again.")
    return data


def write_file(path: Path, data: dict) -> None:
    """Atomically, created 0600 (never a moment readable by others), in a 0700 directory."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # mkstemp creates the file 0600 whatever the umask; os.replace then swaps it in whole.
    fd, temporary = tempfile.mkstemp(prefix=".config-", suffix=".yaml", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            yaml.safe_dump(data, handle, default_flow_style=False, sort_keys=False)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def read_contexts(environ=os.environ) -> Contexts:
    """The file's contexts; a file of the single-panel days is the context `default`."""
    path = config_path(environ)
    data = read_file(path)
    if "contexts" not in data and "current-context" not in data:
        if not data.get("url") and not data.get("token"):
            return Contexts(path)
        old = {key: data[key] for key in ("url", "token", "username") if data.get(key)}
        return Contexts(path, DEFAULT_CONTEXT, {DEFAULT_CONTEXT: old})
    entries = data.get("contexts") or {}
    if not isinstance(entries, dict) or not all(isinstance(entry, dict) for entry in entries.values()):
        raise UsageError(
            f"{path}: `contexts` must map each name to its url and token; run ascend-panel login."
        )
    return Contexts(path, str(data.get("current-context") or ""), {str(k): v for k, v in entries.items()})


def login_context(url: str, requested: str | None, environ=os.environ) -> str:
    """The context `login URL` stores into: the one asked for; else the one that already points at URL;
    else `default` for the first panel, or the panel's host[:port] beside others."""
    return _login_name(read_contexts(environ), url, requested)


def _login_name(contexts: Contexts, url: str, requested: str | None) -> str:
    if requested:
        return check_context_name(requested)
    same = [name for name, entry in contexts.entries.items() if entry.get("url") == url]
    if same:
        return contexts.current if contexts.current in same else same[0]
    if not contexts.entries:
        return DEFAULT_CONTEXT
    name = urlsplit(url).netloc
    if name in contexts.entries:
        raise UsageError(f"The context {name!r} points at another panel; name this one with --context NAME.")
    return check_context_name(name)


def save(url: str, token: str, username: str = "", environ=os.environ, context: str | None = None) -> Path:
    """Store URL and token as `context` (chosen as login_context does when None) and make it current."""
    contexts = read_contexts(environ)
    name = _login_name(contexts, url, context)
    entry = {"url": url, "token": token}
    if username:
        entry["username"] = username
    contexts.entries[name] = entry
    contexts.current = name
    contexts.save()
    return contexts.path


def selected_context(contexts: Contexts, environ=os.environ) -> tuple[str, bool]:
    """(the context this run uses, whether it was asked for by --context or ASCEND_PANEL_CONTEXT)."""
    asked = _chosen_context or environ.get(CONTEXT_ENV) or ""
    return (asked, True) if asked else (contexts.current, False)


def load(environ=os.environ) -> Settings:
    """URL and token: each from its variable when set, else from the context in use; UsageError when
    either is missing (the caller has not signed in) or a context asked for does not exist."""
    contexts = read_contexts(environ)
    name, asked = selected_context(contexts, environ)
    if asked and name not in contexts.entries:
        known = ", ".join(sorted(contexts.entries)) or "none"
        raise UsageError(f"No context named {name!r} in {contexts.path} (there are: {known}).")
    stored = contexts.entries.get(name) or {}
    url = environ.get(URL_ENV) or stored.get("url") or ""
    token = environ.get(TOKEN_ENV) or stored.get("token") or ""
    if not url or not token:
        missing = " and ".join(n for n, v in (("URL", url), ("token", token)) if not v)
        raise UsageError(
            f"No panel {missing}: run `ascend-panel login URL`, or set {URL_ENV} and {TOKEN_ENV}."
        )
    from_env = [variable for variable in (URL_ENV, TOKEN_ENV) if environ.get(variable)]
    source = ", ".join(from_env) if from_env else str(contexts.path)
    used = "" if len(from_env) == 2 else name
    return Settings(url=normalise_url(str(url)), token=str(token), source=source, context=used)
