"""`login`: sign in to a panel and keep its URL and a new API token in the config file (config.py), as a
context (one panel among several; `config use-context` switches)."""

import argparse
import getpass
import socket
import sys
from datetime import UTC, datetime

from panel.cli import config
from panel.cli.client import ApiError, Client
from panel.cli.commands import add_command
from panel.cli.errors import CliError, UsageError

EPILOG = """\
examples:
  ascend-panel login https://panel.example.com --username alice
  echo "$PANEL_PASSWORD" | ascend-panel login https://panel.example.com -u ci --password-stdin
  ascend-panel login https://panel.example.com --token "$PANEL_TOKEN"
  ascend-panel login https://lab.example.com -u alice --context lab

With a user name and password the panel issues a new API token of that user (a sign-in, audited and locked
after repeated failures); the password is not stored. The file is written readable by you only (0600).
The panel is stored as a context and becomes the current one: --context NAME names it (default: the
context already pointing at URL, else `default` for the first panel, else the URL's host)."""


def register(commands) -> None:
    parser = add_command(
        commands, "login", "sign in and store the panel's URL and an API token", epilog=EPILOG
    )
    parser.add_argument("url", metavar="URL", help="the panel, e.g. https://panel.example.com")
    parser.add_argument("-u", "--username", help="your user name (asked for when left out)")
    parser.add_argument(
        "--password-stdin", action="store_true", help="read the password from stdin (for scripts)"
    )
    parser.add_argument("--token", help="store this API token instead of signing in with a password")
    parser.add_argument("--token-name", help="the new token's name (default: ascend-panel on HOST at TIME)")
    # SUPPRESS: `ascend-panel --context lab login URL` (the global flag) means the same.
    context = parser.add_argument(
        "--context", default=argparse.SUPPRESS, metavar="NAME", help="the context to store the panel as"
    )
    context.completer = "contexts"
    parser.set_defaults(run=login)


def login(args) -> int:
    url = config.normalise_url(args.url)
    if args.token and (args.username or args.password_stdin):
        raise UsageError("Give either --token or a user name and password, not both.")
    context = config.login_context(url, getattr(args, "context", None))  # a bad name fails before sign-in
    with Client(url, args.token or "") as client:
        if args.token:
            token, username = args.token, ""
            client.request("GET", "/tokens/")  # proves the token: 401 for a wrong, revoked or expired one
        else:
            username, password = _credentials(args)
            token = _sign_in(client, username, password, args.token_name or _token_name())
    path = config.save(url, token, username, context=context)
    who = f" as {username}" if username else ""
    print(f"Signed in to {url}{who}; the token is stored in {path} as context {context}.")
    return 0


def _credentials(args) -> tuple[str, str]:
    username = args.username
    if not username:
        if not sys.stdin.isatty():
            raise UsageError("Give --username (no terminal to ask on).")
        username = input("Username: ").strip()
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif sys.stdin.isatty():
        password = getpass.getpass("Password: ")
    else:
        raise UsageError("No terminal to ask for the password on: use --password-stdin or --token.")
    if not username or not password:
        raise UsageError("A user name and a password are needed.")
    return username, password


def _sign_in(client: Client, username: str, password: str, name: str) -> str:
    body = {"username": username, "password": password, "name": name}
    try:
        return client.request("POST", "/tokens/sign-in/", json=body).json()["token"]
    except ApiError as error:
        if error.status == 404:
            raise CliError(
                f"{client.url} has no API sign-in (an older panel): create a token on its settings page "
                "and run `ascend-panel login URL --token TOKEN`."
            ) from None
        raise


def _token_name() -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"ascend-panel on {socket.gethostname()[:60]} at {stamp}"
