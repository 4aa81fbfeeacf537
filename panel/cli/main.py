"""`ascend-panel`: the parser, and one place that turns every outcome into an exit code (errors.py)."""

import argparse
import os
import sys

from panel.cli import config, output
from panel.cli.client import version
from panel.cli.commands import (
    account,
    apply,
    chat,
    completion,
    contexts,
    create,
    deployments,
    describe,
    diff,
    events,
    logs,
    resources,
    rollout,
    scale,
    sleep,
)
from panel.cli.errors import INTERRUPTED, USAGE, CliError

DESCRIPTION = """\
Deploy and run models on an Ascend Panel from a terminal or a CI job.

Sign in once with `ascend-panel login URL`, or set ASCEND_PANEL_URL and ASCEND_PANEL_TOKEN.
Several panels: `login URL --context NAME`, then `config use-context NAME` or `--context NAME`.
Exit codes: 0 ok, 1 failed (the API refused, or the deployment failed), 2 usage, 3 timed out.
See docs/cli.md for the spec file and a CI pipeline."""

COMMAND_MODULES = (
    account,
    contexts,
    resources,
    apply,
    diff,
    deployments,
    describe,
    rollout,
    scale,
    create,
    logs,
    events,
    sleep,
    chat,
    completion,
)
CONTEXT_HELP = "the context (a panel you signed in to) to use instead of the current one"


class Parser(argparse.ArgumentParser):
    """argparse with the help of the command at fault after a usage error (exit 2, as argparse does)."""

    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(USAGE, f"{self.prog}: error: {message}\nRun `{self.prog} --help` for more.\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="ascend-panel", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)
    for module in COMMAND_MODULES:
        module.register(commands)
    _completes(parser.add_argument("--context", metavar="NAME", help=CONTEXT_HELP), "contexts")
    _context_option_everywhere(parser)
    parser.set_defaults(root_parser=parser)  # for a command about the whole parser (completion)
    return parser


def _completes(action: argparse.Action, kind: str) -> None:
    """What `completion bash` offers for this option (argparse's Action declares no such field)."""
    vars(action)["completer"] = kind


def _context_option_everywhere(parser: argparse.ArgumentParser) -> None:
    """`--context` after the command too (`ascend-panel get deployments --context lab`), as kubectl takes
    it. SUPPRESS: a command's parser leaves the value given before the command alone."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                if "--context" not in sub._option_string_actions:
                    _completes(
                        sub.add_argument(
                            "--context", metavar="NAME", default=argparse.SUPPRESS, help=CONTEXT_HELP
                        ),
                        "contexts",
                    )
                _context_option_everywhere(sub)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    config.choose_context(args.context)
    try:
        return args.run(args) or 0
    except CliError as error:
        for line in [*output.error_lines(error.message, getattr(error, "body", None)), *error.details]:
            print(line, file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        # `ascend-panel logs x | head`: the reader left. Point stdout at /dev/null so that Python's own flush
        # at exit does not fail a second time (the recipe of Python's signal documentation).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        config.choose_context(None)  # main() runs again in the same process in tests
