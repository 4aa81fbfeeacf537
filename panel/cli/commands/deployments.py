"""`get deployments`, `wait` and `delete`."""

from panel.cli import output
from panel.cli.client import WAIT_MARGIN_S, ApiError, connect
from panel.cli.commands import add_command, add_group, name_argument, timeout_option
from panel.cli.commands.labels import add_selector_options, list_params, with_labels
from panel.cli.durations import describe
from panel.cli.errors import CliError, UsageError
from panel.cli.following import printer, watch
from panel.cli.jsonpath import OutputFormats, output_format
from panel.cli.waiting import TARGETS, wait_for

MAX_SERVER_WAIT_S = 3600  # the panel's limit on `?wait=…&timeout=`

GET_EPILOG = """\
examples:
  ascend-panel get deployments
  ascend-panel get deployments qwen-chat -o yaml
  ascend-panel get deployments -o jsonpath='{.items[*].name}'
  ascend-panel get deployments qwen-chat -o jsonpath='{.status}'
  ascend-panel get deployments qwen-chat --spec > qwen-chat.yaml   # apply -f takes it back
  ascend-panel get deployments -w
  ascend-panel get deployments -l app=chat,tier!=dev --show-labels

-o json and -o yaml print the same object: the deployment as the API has it, or for a list
{"items": [...]}; -o jsonpath=TEMPLATE prints parts of it ({.a.b}, {.items[*].name}, {.items[0].x},
{.items[?(@.status=="running")].name}, {"\\n"}); -o name prints names only.
--spec prints the deployment's spec instead (YAML unless -o json): what `apply -f` reads.
-w follows the deployments (or NAME) as they change, a line per change, until Ctrl-C (exit 0)."""

WAIT_EPILOG = """\
examples:
  ascend-panel wait qwen-chat --for running --timeout 10m
  ascend-panel wait qwen-chat --for deleted

Exits 0 once reached, 1 when the deployment fails first (its findings and log tail are printed),
3 when the timeout runs out."""


def register(commands) -> None:
    get = add_group(commands, "get", "show deployments")
    deployments = add_command(
        get, "deployments", "list deployments, or show one", epilog=GET_EPILOG, aliases=["deployment"]
    )
    name = deployments.add_argument("name", metavar="NAME", nargs="?", help="one deployment (or its id)")
    name.completer = "deployments"
    deployments.add_argument(
        "-o",
        "--output",
        type=output_format,
        choices=GET_FORMATS,
        default="table",
        help="table, json, yaml, name or jsonpath=TEMPLATE (default: table)",
    )
    deployments.add_argument(
        "-w", "--watch", action="store_true", help="after the list, print each change until Ctrl-C"
    )
    deployments.add_argument(
        "--spec", action="store_true", help="print NAME's spec, which apply -f takes back (YAML or -o json)"
    )
    add_selector_options(deployments)
    deployments.set_defaults(run=get_deployments)

    wait = add_command(
        commands, "wait", "wait until a deployment is running, stopped or deleted", epilog=WAIT_EPILOG
    )
    name_argument(wait)
    wait.add_argument("--for", dest="target", choices=TARGETS, required=True, help="the state to wait for")
    timeout_option(wait)
    wait.set_defaults(run=wait_command)

    delete = add_command(commands, "delete", "delete a deployment (its engines are stopped first)")
    name_argument(delete)
    delete.add_argument("--wait", action="store_true", help="return once it is gone")
    timeout_option(delete, "wait with --wait")
    delete.add_argument(
        "--ignore-not-found", action="store_true", help="exit 0 when there is no such deployment"
    )
    delete.set_defaults(run=delete_command)


def deployment_row(d: dict) -> list:
    npus = ", ".join(f"{n['node']}:{n['logic_id']}" for n in d.get("npus") or [])
    return [
        d["name"],
        status_text(d),
        d.get("model_name", ""),
        npus,
        d.get("endpoint") or "",
        output.age(d.get("created")),
    ]


def status_text(d: dict) -> str:
    """The status, with the replicas running and a rolling update's progress when there are any."""
    text = d.get("status", "")
    if text == "deleted":  # its last line in a watch (following.py)
        return text
    replicas = d.get("replicas") or []
    if replicas:
        up = 1 + sum(r.get("status") == "running" for r in replicas) - (text != "running")
        text += f" {up}/{1 + len(replicas)}"
    rollout = d.get("rollout") or {}
    if rollout.get("status") == "running":
        text += f" (rolling {rollout.get('done', 0)}/{rollout.get('total', 0)}: {rollout.get('phase', '')})"
    return text


HEADERS = ["NAME", "STATUS", "MODEL", "NPUS", "ENDPOINT", "AGE"]
GET_FORMATS = OutputFormats(output.FORMATS)


def get_deployments(args) -> int:
    if args.spec and (args.name is None or args.watch):
        raise UsageError("--spec prints the spec of one deployment: give NAME, without -w.")
    if args.watch and list_params(args):
        raise UsageError("-w follows every deployment or NAME; it does not take -l (yet): use NAME.")
    if args.watch:
        # Ctrl-C ends it with exit 0, as it ends kubectl's
        return watch(args.name, printer(args.output, HEADERS, deployment_row))
    selector = list_params(args)
    with connect() as client:
        if args.name is None:
            items = list(client.pages("/deployments/", **selector))
            if not items and args.output == "table":
                output.note("No deployments.")
                return 0
            rows, headers = with_labels(args, items, [deployment_row(d) for d in items], HEADERS)
            # json, yaml and jsonpath see the same object, a list as kubectl's: {"items": [...]}
            print(output.render({"items": items}, args.output, rows, headers, [d["name"] for d in items]))
            return 0
        deployment = client.deployment(args.name)
        if args.spec:
            spec = client.get(f"/deployments/{deployment['id']}/", format="spec")
            fmt = "yaml" if args.output == "table" else args.output
            print(output.render(spec, fmt, names=[deployment["name"]]))
            return 0
    rows, headers = with_labels(args, [deployment], [deployment_row(deployment)], HEADERS)
    print(output.render(deployment, args.output, rows, headers, [deployment["name"]]))
    return 0


def wait_command(args) -> int:
    with connect() as client:
        deployment = wait_for(client, args.name, args.target, args.timeout)
    print(f"{args.name}: {deployment['status'] if deployment else 'deleted'}")
    return 0


def server_wait(seconds: float) -> int:
    """`timeout=` for the panel's own wait, which takes whole seconds up to an hour."""
    if seconds > MAX_SERVER_WAIT_S:
        raise UsageError(f"--timeout is at most {describe(MAX_SERVER_WAIT_S)}: the panel waits no longer.")
    return max(1, round(seconds))


def delete_command(args) -> int:
    params = {"wait": "deleted", "timeout": server_wait(args.timeout)} if args.wait else None
    with connect() as client:
        deployment = client.find_deployment(args.name)
        if deployment is None:
            if args.ignore_not_found:
                output.note(f"{args.name}: not found")
                return 0
            raise CliError(f"No deployment named {args.name!r}.")
        timeout = args.timeout + WAIT_MARGIN_S if args.wait else None
        try:
            response = client.request(
                "DELETE", f"/deployments/{deployment['id']}/", params=params, timeout=timeout
            )
        except ApiError as error:
            if error.status == 404 and args.ignore_not_found:
                return 0
            raise
        gone = response.json().get("deleted")
        if args.wait and not gone:
            # A panel without `?wait=` on delete answers at once (202, still stopping): wait here instead.
            wait_for(client, args.name, "deleted", args.timeout)
            gone = True
    print(f"{args.name}: {'deleted' if gone else 'deleting'}")
    return 0
