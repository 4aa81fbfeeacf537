"""`logs NAME [-f] [--probes]`: the deployment's log (engine output and the panel's start events), page by
page, without the lines of the panel's own health probes unless --probes."""

import time

from panel.cli.client import ApiError, connect
from panel.cli.commands import add_command, name_argument
from panel.cli.output import note

FOLLOW_EVERY_S = 1.0
PAGE_LINES = 1000

EPILOG = """\
examples:
  ascend-panel logs qwen-chat
  ascend-panel logs qwen-chat -f --timestamps
  ascend-panel logs qwen-chat --probes

-f keeps printing new lines until Ctrl-C, or until the deployment is deleted (exit 0). The engine's lines
for the panel's own probes (GET /health, /ping, /metrics every few seconds) are left out; --probes prints
them too."""


def register(commands) -> None:
    parser = add_command(commands, "logs", "print a deployment's log", epilog=EPILOG)
    name_argument(parser)
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    parser.add_argument("--timestamps", action="store_true", help="start each line with its time and node")
    parser.add_argument(
        "--after-seq", type=int, default=0, metavar="N", help="only lines after line number N"
    )
    parser.add_argument(
        "--probes", action="store_true", help="also print the panel's /health and /metrics probe lines"
    )
    parser.set_defaults(run=logs_command)


def logs_command(args) -> int:
    with connect() as client:
        deployment = client.deployment(args.name)
        path = f"/deployments/{deployment['id']}/logs/"
        seq = args.after_seq
        while True:
            try:
                page = client.get(
                    path, after_seq=seq, limit=PAGE_LINES, **({"probes": "true"} if args.probes else {})
                )
            except ApiError as error:
                if error.status == 404 and args.follow:
                    note(f"{args.name}: deleted")
                    return 0
                raise
            for line in page["results"]:
                text = line["line"].rstrip("\n")
                print(f"{line['time']} {line['node']} {text}" if args.timestamps else text, flush=args.follow)
                seq = max(seq, line["seq"])
            if len(page["results"]) == PAGE_LINES:
                continue  # a full page: the next one at once
            # A short page answered every line up to last_seq (read before the lines): the probe lines left
            # out after the last one printed need not be read again at the next poll.
            seq = max(seq, page.get("last_seq", seq))
            if not args.follow:
                return 0
            time.sleep(FOLLOW_EVERY_S)
