"""`-l/--selector` and `--show-labels` of `get deployments`: the panel selects (`?labels=`, the same
syntax as kubectl's equality selectors), the CLI only passes the selector on and prints the labels."""

from panel.cli.errors import UsageError

SELECTOR_HELP = (
    "only deployments whose labels match: app=chat, tier!=dev, gpu (has the label), !canary (has not); "
    "commas join requirements that must all hold"
)


def add_selector_options(parser) -> None:
    parser.add_argument("-l", "--selector", metavar="SELECTOR", help=SELECTOR_HELP)
    parser.add_argument("--show-labels", action="store_true", help="add a LABELS column to the table")


def list_params(args) -> dict:
    """The list's query for the selector given (the panel refuses a bad one with 400 naming `labels`)."""
    if args.selector is None:
        return {}
    if getattr(args, "name", None) is not None:
        raise UsageError("Give a NAME or a selector (-l), not both.")
    return {"labels": args.selector}


def labels_text(labels: dict | None) -> str:
    """`app=chat,tier=prod` in key order, as kubectl's --show-labels prints them; `<none>` without."""
    if not labels:
        return "<none>"
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def with_labels(args, items: list[dict], rows: list[list], headers: list[str]) -> tuple[list, list]:
    """Rows and headers with a LABELS column when --show-labels was given."""
    if not args.show_labels:
        return rows, headers
    return [[*row, labels_text(item.get("labels"))] for item, row in zip(items, rows, strict=True)], [
        *headers,
        "LABELS",
    ]
