"""The commands, one module per group; each has `register(commands)` that adds its parsers, whose `run`
default is the function that carries the command out and returns its exit code."""

import argparse

from panel.cli.durations import duration
from panel.cli.output import FORMATS

DEFAULT_WAIT_S = 600.0  # an engine start on a busy node takes minutes


def add_command(commands, name: str, summary: str, description: str = "", epilog: str = "", **kwargs):
    return commands.add_parser(
        name,
        help=summary,
        description=description or summary,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kwargs,
    )


def add_group(commands, name: str, summary: str):
    """A command with commands of its own (`models ls`); alone it is a usage error."""
    parser = add_command(commands, name, summary)
    return parser.add_subparsers(dest=f"{name}_command", metavar="COMMAND", required=True)


def output_option(parser, formats=FORMATS, default: str = "table") -> None:
    parser.add_argument(
        "-o", "--output", choices=formats, default=default, help=f"output format (default: {default})"
    )


def timeout_option(parser, what: str = "wait") -> None:
    parser.add_argument(
        "--timeout",
        type=duration,
        default=DEFAULT_WAIT_S,
        metavar="DURATION",
        help=f"how long to {what}: 90s, 10m, 1h (default: 10m); running out exits 3",
    )


def name_argument(parser, completer: str | None = "deployments", help: str = "the deployment's name (or id)"):
    action = parser.add_argument("name", metavar="NAME", help=help)
    action.completer = completer  # read by `completion bash` to offer names from the panel
    return action


def file_option(parser) -> None:
    action = parser.add_argument(
        "-f",
        "--file",
        required=True,
        metavar="FILE",
        help="the spec file (YAML or JSON), a folder of them, or - for stdin",
    )
    action.completer = "files"
