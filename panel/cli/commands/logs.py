"""`logs NAME [-f]`: the deployment's log (engine output and the panel's start events), page by page."""

import time

from panel.cli.client import ApiError, connect
from panel.cli.commands import add_command, name_argument
from panel.cli.output import note

FOLLOW_EVERY_S = 1.0

EPILOG = """\
examples:
  ascend-panel logs qwen-chat
  ascend-panel logs qwen-chat -f --timestamps

-f keeps printing new lines until Ctrl-C, or until the deployment is deleted (exit 0)."""


def register(commands) -> None:
    parser = add_command(commands, "logs", "print a deployment's log", epilog=EPILOG)
    name_argument(parser)
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    parser.add_argument("--timestamps", action="store_true", help="start each line with its time and node")
    parser.add_argument(
        "--after-seq", type=int, default=0, metavar="N", help="only lines after line number N"
    )
    parser.set_defaults(run=logs_command)


def logs_command(args) -> int:
    with connect() as client:
        deployment = client.deployment(args.name)
        path = f"/deployments/{deployment['id']}/logs/"
        seq = args.after_seq
        while True:
            try:
                page = client.get(path, after_seq=seq)
            except ApiError as error:
                if error.status == 404 and args.follow:
                    note(f"{args.name}: deleted")
                    return 0
                raise
            for line in page["results"]:
                text = line["line"].rstrip("\n")
                print(f"{line['time']} {line['node']} {text}" if args.timestamps else text, flush=args.follow)
                seq = max(seq, line["seq"])
            if page["results"] and seq < page.get("last_seq", seq):
                continue  # a full page: the next one at once
            if not args.follow:
                return 0
            time.sleep(FOLLOW_EVERY_S)
