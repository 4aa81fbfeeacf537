"""`scale NAME [--role prefill|decode] REPLICAS`: a new replica count (`POST …/scale/`), of one role for a
disaggregated deployment, applied as apply does (the same plan, diff, effect and revision)."""

from panel.cli.commands import add_command, name_argument, output_option
from panel.cli.commands.apply import send_change
from panel.cli.locking import change_params, lock_option

EPILOG = """\
examples:
  ascend-panel scale qwen-chat 3
  ascend-panel scale deepseek-pd --role decode 3 --dry-run
  ascend-panel scale deepseek-pd --role prefill 2 && ascend-panel rollout status deepseek-pd

A deployment with prefill and decode roles is scaled one role at a time: --role is needed for it, and
refused for a plain one (exit 1 with the panel's sentence). New engines start at once; scaling down
removes the highest ones of that role. A count the autoscaler owns (the deployment's, or that role's
roles.<role>.autoscale) is refused: change its min and max instead. The dry run prints what would change
and what each engine would do."""


def register(commands) -> None:
    scale = add_command(commands, "scale", "set a deployment's replica count (per role)", epilog=EPILOG)
    name_argument(scale)
    scale.add_argument("replicas", type=_count, metavar="REPLICAS", help="the new count (1-64)")
    scale.add_argument(
        "--role", choices=("prefill", "decode"), help="the role to scale, for a deployment with roles"
    )
    scale.add_argument("--dry-run", action="store_true", help="show what would change, change nothing")
    lock_option(scale)
    scale.add_argument(
        "--idempotency-key", metavar="KEY", help="send Idempotency-Key KEY: a retried job scales once"
    )
    output_option(scale, formats=("text", "json", "yaml"), default="text")
    scale.set_defaults(run=scale_command)


def _count(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 64:
        raise ValueError(text)
    return int(text)


_count.__name__ = "replica count"  # argparse's "invalid replica count value: '0'"


def scale_command(args) -> int:
    params = {"dry_run": "true"} if args.dry_run else {}
    params.update(change_params(args))
    body = {"replicas": args.replicas, "role": args.role or ""}
    send_change(args, "scale", params, body, "upgrade it, or apply the spec with the new replicas.")
    return 0
