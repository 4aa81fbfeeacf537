"""`events NAME`: the serving decisions recorded for a deployment (scale, sleep and wake, NPU failover,
rollouts, restarts; docs/serving-plane.md §2), oldest of the page first so the newest ends the output, each
reason in the reader's language."""

from panel.cli import output
from panel.cli.client import connect
from panel.cli.commands import add_command, name_argument, output_option
from panel.cli.errors import CliError

# The panel's DecisionKind values (panel/core/domain/choices.py): the CLI imports nothing of the panel.
KINDS = (
    "scale_up", "scale_down", "scale_refused", "sleep", "wake", "wake_failed", "npu_suspect", "npu_failed",
    "npu_recovered", "replica_moved", "request_retried", "rollout", "revision", "restart", "gave_up",
    "start", "stop",
)  # fmt: skip
ROLES = ("plain", "prefill", "decode")
MAX_LIMIT = 1000

EPILOG = """\
examples:
  ascend-panel events qwen-chat
  ascend-panel events qwen-chat --kind scale_up --limit 10
  ascend-panel events pd-qwen --role decode -o json

The table lists the newest decisions (50 unless --limit), oldest first. FIGURES are the numbers the
decision was taken on; OUTCOME is pending until it was carried out (done) or could not be (failed, with
why after the reason)."""


def register(commands) -> None:
    parser = add_command(commands, "events", "list the decisions recorded for a deployment", epilog=EPILOG)
    name_argument(parser)
    parser.add_argument("--kind", choices=KINDS, help="only decisions of this kind")
    parser.add_argument("--role", choices=ROLES, help="only decisions about this role")
    parser.add_argument("--limit", type=int, default=50, metavar="N", help="the newest N (default 50)")
    output_option(parser, formats=("table", "json", "yaml"))
    parser.set_defaults(run=events_command)


def events_command(args) -> int:
    if not 1 <= args.limit <= MAX_LIMIT:
        raise CliError(f"--limit takes 1 to {MAX_LIMIT}.")
    query: dict = {"page_size": args.limit}
    if args.kind:
        query["kind"] = args.kind
    if args.role:
        query["role"] = "" if args.role == "plain" else args.role
    with connect() as client:
        deployment = client.deployment(args.name)
        answer = client.get(f"/deployments/{deployment['id']}/events/", **query)
    if args.output != "table":
        print(output.render(answer, args.output))
        return 0
    events = list(reversed(answer.get("results") or []))
    if not events:
        print(f"{answer.get('deployment', args.name)}: no decisions recorded")
        return 0
    print(output.table([row(event) for event in events], HEADERS))
    return 0


HEADERS = ["AGE", "KIND", "ROLE", "BY", "OUTCOME", "FIGURES", "REASON"]


def row(event: dict) -> list:
    reason = event.get("reason_display") or event.get("reason") or ""
    why_not = event.get("outcome_reason_display") or event.get("outcome_reason") or ""
    return [
        output.age(event.get("time")),
        event.get("kind", ""),
        event.get("role") or "-",
        event.get("user") or event.get("actor", ""),
        event.get("outcome", ""),
        figures(event.get("figures") or {}) or "-",
        f"{reason} — {why_not}" if why_not else reason,
    ]


def figures(values: dict) -> str:
    """{"to": 3.0, "from": 2} → "from=2 to=3": by name (PostgreSQL's jsonb keeps no order, and a script
    reading the column wants one), whole numbers without their ".0"."""
    return " ".join(f"{name}={_number(values[name])}" for name in sorted(values))


def _number(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
