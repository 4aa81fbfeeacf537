"""`config get-contexts|current-context|use-context|delete-context`: the panels `login` stored (config.py),
and which one commands talk to. The global `--context NAME` picks one for a single command."""

import os

from panel.cli import config, output
from panel.cli.commands import add_command, add_group
from panel.cli.errors import CliError, UsageError

EPILOG = """\
examples:
  ascend-panel login https://panel.example.com -u alice --context prod
  ascend-panel login http://10.0.0.5:8000 -u alice --context lab
  ascend-panel config get-contexts
  ascend-panel config use-context lab
  ascend-panel --context prod get deployments

ASCEND_PANEL_CONTEXT picks a context like --context; ASCEND_PANEL_URL and ASCEND_PANEL_TOKEN still
override the context's URL and token."""


def register(commands) -> None:
    group = add_group(commands, "config", "list and switch the panels you signed in to (contexts)")
    listing = add_command(group, "get-contexts", "list the contexts; * marks the one in use", epilog=EPILOG)
    listing.add_argument(
        "-o", "--output", choices=("table", "name"), default="table", help="output format (default: table)"
    )
    listing.set_defaults(run=get_contexts)

    current = add_command(group, "current-context", "print the name of the context in use")
    current.set_defaults(run=current_context)

    use = add_command(group, "use-context", "make a context the current one", epilog=EPILOG)
    _name_argument(use)
    use.set_defaults(run=use_context)

    delete = add_command(group, "delete-context", "forget a context and its token (the token stays valid)")
    _name_argument(delete)
    delete.set_defaults(run=delete_context)


def _name_argument(parser) -> None:
    action = parser.add_argument("context_name", metavar="NAME", help="the context's name")
    action.completer = "contexts"


def _existing(contexts: config.Contexts, name: str) -> dict:
    if name not in contexts.entries:
        known = ", ".join(sorted(contexts.entries)) or "none; run ascend-panel login URL --context NAME"
        raise UsageError(f"No context named {name!r} (there are: {known}).")
    return contexts.entries[name]


def _env_note() -> None:
    overriding = [name for name in (config.URL_ENV, config.TOKEN_ENV) if os.environ.get(name)]
    if overriding:
        output.note(f"note: {' and '.join(overriding)} override the context's values.")


def get_contexts(args) -> int:
    contexts = config.read_contexts()
    in_use, _asked = config.selected_context(contexts)
    names = sorted(contexts.entries)
    if args.output == "name":
        if names:
            print("\n".join(names))
        return 0
    if not names:
        output.note("No contexts: run `ascend-panel login URL`.")
        return 0
    rows = [
        ["*" if name == in_use else "", name, entry.get("url", ""), entry.get("username", "")]
        for name, entry in ((name, contexts.entries[name]) for name in names)
    ]
    print(output.table(rows, ["CURRENT", "NAME", "URL", "USER"]))
    _env_note()
    return 0


def current_context(args) -> int:
    contexts = config.read_contexts()
    name, asked = config.selected_context(contexts)
    if not name:
        raise CliError(
            "No current context: run `ascend-panel login URL` or `ascend-panel config use-context NAME`."
        )
    if asked:
        _existing(contexts, name)
    print(name)
    return 0


def use_context(args) -> int:
    contexts = config.read_contexts()
    entry = _existing(contexts, args.context_name)
    contexts.current = args.context_name
    contexts.save()
    print(f"Switched to context {args.context_name} ({entry.get('url', '')}).")
    _env_note()
    return 0


def delete_context(args) -> int:
    contexts = config.read_contexts()
    _existing(contexts, args.context_name)
    del contexts.entries[args.context_name]
    was_current = contexts.current == args.context_name
    if was_current:
        contexts.current = ""
    contexts.save()
    print(f"Deleted context {args.context_name}.")
    if was_current:
        output.note("It was the current context: choose another with `ascend-panel config use-context NAME`.")
    return 0
