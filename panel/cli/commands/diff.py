"""`diff -f FILE|DIR`, as `kubectl diff`: a unified diff between each deployment's live spec and the spec it
would have once the file is applied, which the panel's own dry run answers (`PUT …?dry_run=true`, its
`spec`), so fields the planner fills or keeps are compared as apply compares them. Exit 0 when nothing
differs, 1 when something does, 2 on any error."""

import difflib

from panel.cli import output
from panel.cli.client import ApiError, Client, connect, path_of
from panel.cli.commands import add_command
from panel.cli.commands.apply import recursive_option
from panel.cli.errors import CliError
from panel.cli.specs import read_specs

SAME, DIFFERENT, ERROR = 0, 1, 2

EPILOG = """\
examples:
  ascend-panel diff -f qwen-chat.yaml
  ascend-panel diff -f deploy/ && echo "nothing to apply"

Prints a unified diff per deployment (live/NAME → merged/NAME: the spec it has, the spec it would have)
and changes nothing. A new deployment diffs against nothing. A change the spec does not show (the node's
facts moved on, so its launch would) is named on stderr. A DIR takes every *.yaml, *.yml and *.json in it
(its subfolders' too with -R), in name order.
Exit codes as kubectl diff: 0 no differences, 1 differences, 2 an error (a file that cannot be read, a spec
the panel refuses, a panel that cannot be reached)."""


def register(commands) -> None:
    diff = add_command(commands, "diff", "show what applying a spec file would change", epilog=EPILOG)
    action = diff.add_argument(
        "-f", "--file", required=True, metavar="FILE|DIR", help="a spec file, a folder of them, or - (stdin)"
    )
    action.completer = "files"
    recursive_option(diff)
    diff.set_defaults(run=diff_command)


def diff_command(args) -> int:
    try:
        specs = read_specs(args.file, args.recursive)  # a name given twice is refused here
        different = False
        with connect() as client:
            for spec in specs:
                text, hidden = compare(client, spec)
                if text:
                    print(text, end="", flush=True)
                for line in hidden:
                    output.note(line)
                different = different or bool(text or hidden)
    except CliError as error:
        error.code = ERROR  # kubectl diff's: 1 means "differs", so every failure is above it
        raise
    return DIFFERENT if different else SAME


def compare(client: Client, spec: dict) -> tuple[str, list[str]]:
    """(the unified diff of the live spec and the merged one, notes of changes the diff cannot show)."""
    name = str(spec["name"])
    path = f"/deployments/{path_of(name)}/"
    answer = client.request("PUT", path, json=spec, params={"dry_run": "true"}).json()
    if "spec" not in answer:
        raise CliError("This panel's dry run does not answer the spec it would make; upgrade the panel.")
    try:
        live = client.get(path, format="spec")
    except ApiError as error:
        if error.status != 404:
            raise
        live = None
    merged = answer.get("spec")
    if merged is None:
        # A folder the panel has not registered (or still inspects): apply would act; the spec is unknown.
        why = "the spec it would have is known once its model folder is registered and inspected (apply does)"
        return "", [f"{name}: {answer.get('result')}: {why}"]
    before = [] if live is None else _lines(live)
    text = "".join(difflib.unified_diff(before, _lines(merged), f"live/{name}", f"merged/{name}"))
    if not text and answer.get("result") != "unchanged":
        fields = ", ".join(change.get("field", "?") for change in answer.get("changes") or [])
        return text, [f"{name}: changed: {fields} ({answer.get('effect')}), which the spec does not show"]
    return text, []


def _lines(spec: dict) -> list[str]:
    return [line + "\n" for line in output.to_yaml(spec).splitlines()]
