"""Where the CLI finds its panel: `login` stores URL and token in the user's config directory
($XDG_CONFIG_HOME/ascend-panel/config.yaml, else ~/.config/…), readable by the user only (0600);
ASCEND_PANEL_URL and ASCEND_PANEL_TOKEN override the file (what a CI job sets instead of logging in)."""

import contextlib
import os
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from panel.cli.errors import UsageError

URL_ENV = "ASCEND_PANEL_URL"
TOKEN_ENV = "ASCEND_PANEL_TOKEN"  # noqa: S105 (the variable's name, not a token)


@dataclass(frozen=True)
class Settings:
    url: str
    token: str
    source: str  # where they came from, for messages: the file's path or the variables


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


def save(url: str, token: str, username: str = "", environ=os.environ) -> Path:
    path = config_path(environ)
    data = {"url": url, "token": token}
    if username:
        data["username"] = username
    write_file(path, data)
    return path


def load(environ=os.environ) -> Settings:
    """URL and token: each from its variable when set, else from the file; UsageError when either is
    missing (the caller has not signed in)."""
    path = config_path(environ)
    stored = read_file(path)
    url = environ.get(URL_ENV) or stored.get("url") or ""
    token = environ.get(TOKEN_ENV) or stored.get("token") or ""
    if not url or not token:
        missing = " and ".join(n for n, v in (("URL", url), ("token", token)) if not v)
        raise UsageError(
            f"No panel {missing}: run `ascend-panel login URL`, or set {URL_ENV} and {TOKEN_ENV}."
        )
    from_env = [name for name in (URL_ENV, TOKEN_ENV) if environ.get(name)]
    source = ", ".join(from_env) if from_env else str(path)
    return Settings(url=normalise_url(str(url)), token=str(token), source=source)
