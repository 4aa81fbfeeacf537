"""`create token NAME` and `create key NAME --deployment D`: a new API token of yours (POST
/api/v1/tokens/), and a gateway key, which is a token with the inference scope limited to one deployment's
served model name. The panel shows the raw token once: it is printed alone on stdout (for
`TOKEN=$(ascend-panel create token ci)`), what it may do on stderr."""

import argparse
import re
from datetime import UTC, datetime, timedelta

from panel.cli import output
from panel.cli.client import connect
from panel.cli.commands import add_command, add_group
from panel.cli.durations import parse_duration
from panel.cli.errors import CliError, UsageError

SCOPES = ("inference", "deploy", "admin")
DAYS = re.compile(r"(\d+)d(.*)")

NEW_API_CREDENTIAL_EPILOG = """\
examples:
  ascend-panel create token ci-deploy --scope deploy --expires 90d
  ascend-panel create token laptop --expires 2027-01-31
  TOKEN=$(ascend-panel create token nightly --scope deploy --expires 12h)

Prints the token once, alone on stdout; store it now (the panel keeps only its hash). Without --scope the
token gets all this token may give (your role, when you signed in with a password). A token with the
deploy or inference scope cannot create tokens. Revoke tokens on the settings page."""

KEY_EPILOG = """\
examples:
  ascend-panel create key chat-app --deployment qwen-chat
  ascend-panel create key batch --deployment qwen-chat --rpm 60 --tpm 20000 --expires 30d

A gateway key reaches the panel's OpenAI-compatible gateway (/v1) only, for the deployment's served model
name only. Prints the key once, alone on stdout; the base URL and the model to send go to stderr."""


def register(commands) -> None:
    group = add_group(commands, "create", "create an API token or a gateway key (printed once)")

    token = add_command(group, "token", "create an API token of yours", epilog=NEW_API_CREDENTIAL_EPILOG)
    token.add_argument("name", metavar="NAME", help="the token's name, unique among yours")
    token.add_argument(
        "--scope",
        dest="scopes",
        action="append",
        choices=SCOPES,
        help="what it may reach (repeatable): inference (the /v1 gateway), deploy (the API but users and "
        "tokens), admin (all you may do); default: all this token may give",
    )
    _common_options(token)
    token.set_defaults(run=create_token)

    key = add_command(group, "key", "create a gateway key for one deployment", epilog=KEY_EPILOG)
    key.add_argument("name", metavar="NAME", help="the key's name, unique among your tokens")
    key.add_argument(
        "--deployment", required=True, metavar="D", help="the deployment it may call"
    ).completer = "deployments"
    key.add_argument("--rpm", type=_positive, metavar="N", help="requests per minute it may send")
    key.add_argument("--tpm", type=_positive, metavar="N", help="tokens per minute it may use")
    _common_options(key)
    key.set_defaults(run=create_key)


def _common_options(parser) -> None:
    parser.add_argument(
        "--expires",
        metavar="WHEN",
        help="when it stops working: a duration from now (90d, 12h, 1d12h) or a date or time "
        "(2027-01-31, 2027-01-31T18:00:00+08:00); default: never",
    )
    parser.add_argument(
        "-o", "--output", choices=("token", "json", "yaml"), default="token",
        help="token: the token alone (default); json / yaml: the panel's answer, token included",
    )  # fmt: skip


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a positive whole number: {text!r}")
    return int(text)


def expiry(text: str, now: datetime | None = None) -> datetime:
    """`--expires`: a duration from now (days allowed: 90d, 1d12h) or an ISO date or time (a date means its
    midnight, a time without an offset the local time). UsageError for anything else or a past moment."""
    now = now or datetime.now(UTC)
    text = text.strip()
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        when = None
    if when is not None:
        when = when.astimezone(UTC)  # a naive time is local time
    else:
        days = DAYS.fullmatch(text.lower())
        rest = days.group(2) if days else text
        try:
            seconds = (int(days.group(1)) * 86400 if days else 0) + (parse_duration(rest) if rest else 0)
        except ValueError:
            seconds = 0
        if seconds <= 0:
            raise UsageError(
                f"--expires {text!r}: give a duration from now (90d, 12h, 1d12h) or a date (2027-01-31)."
            )
        when = now + timedelta(seconds=seconds)
    if when <= now:
        raise UsageError(f"--expires {text!r} is in the past.")
    return when


def _issue(args, body: dict, deployment_name: str | None = None) -> dict:
    """POST the token; for a key, limited to the deployment's served model name, and the answer names the
    deployment and the gateway's base URL to call it at."""
    if args.expires:
        body["expires"] = expiry(args.expires).isoformat(timespec="seconds")
    with connect() as client:
        if deployment_name is None:
            return client.request("POST", "/tokens/", json=body).json()
        deployment = client.deployment(deployment_name)
        body["models"] = [deployment.get("served_model_name") or deployment["name"]]
        answer = client.request("POST", "/tokens/", json=body).json()
        return {**answer, "deployment": deployment["name"], "endpoint": deployment.get("endpoint") or ""}


def _print(args, answer: dict) -> None:
    if "token" not in answer:
        raise CliError("The panel did not answer with the new token; revoke it on the settings page.")
    if args.output == "token":
        print(answer["token"], flush=True)
    else:
        print(output.render(answer, args.output))


def _expires_text(answer: dict) -> str:
    return f"expires {answer['expires']}" if answer.get("expires") else "does not expire"


def create_token(args) -> int:
    body = {"name": args.name}
    if args.scopes:
        body["scopes"] = sorted(set(args.scopes), key=SCOPES.index)
    answer = _issue(args, body)
    _print(args, answer)
    scopes = ", ".join(answer.get("scopes") or [])
    output.note(
        f"Created token {answer.get('name')} ({answer.get('prefix')}…; scopes: {scopes}; "
        f"{_expires_text(answer)}). It is shown once: store it now."
    )
    return 0


def create_key(args) -> int:
    body = {"name": args.name, "scopes": ["inference"]}
    if args.rpm:
        body["requests_per_minute"] = args.rpm
    if args.tpm:
        body["tokens_per_minute"] = args.tpm
    answer = _issue(args, body, args.deployment)
    _print(args, answer)
    models = ", ".join(answer.get("models") or [])
    output.note(
        f"Created gateway key {answer.get('name')} ({answer.get('prefix')}…; {_expires_text(answer)}) for "
        f"{answer['deployment']}: base URL {answer['endpoint']}, model {models}. "
        "It is shown once: store it now."
    )
    return 0
