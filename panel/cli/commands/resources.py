"""`nodes ls` and `models ls|add|rm`."""

from panel.cli import output
from panel.cli.client import connect, path_of
from panel.cli.commands import add_command, add_group, name_argument, output_option
from panel.cli.errors import UsageError

MODELS_ADD_EPILOG = """\
examples:
  ascend-panel models add qwen2.5-7b --repo Qwen/Qwen2.5-7B-Instruct
  ascend-panel models add qwen-local --node sim-a2 --path /data/models/qwen2.5-7b-instruct

Registering a name again updates it (no `-2` twins)."""


def register(commands) -> None:
    nodes = add_group(commands, "nodes", "list the panel's nodes")
    ls = add_command(nodes, "ls", "list nodes with their status and NPUs")
    output_option(ls)
    ls.set_defaults(run=nodes_ls)

    models = add_group(commands, "models", "list, register and remove models")
    ls = add_command(models, "ls", "list models and where their copies are")
    output_option(ls)
    ls.set_defaults(run=models_ls)

    add = add_command(
        models, "add", "register a model from a hub or a folder on a node", epilog=MODELS_ADD_EPILOG
    )
    name_argument(add, completer=None, help="the model's name in the panel")
    add.add_argument("--repo", metavar="ID", help="hub id, e.g. Qwen/Qwen2.5-7B-Instruct")
    add.add_argument(
        "--source", choices=("huggingface", "modelscope"), default="huggingface", help="the hub of --repo"
    )
    add.add_argument("--revision", help="the hub revision (default: the newest)")
    add.add_argument("--node", help="the node that holds --path").completer = "nodes"
    add.add_argument("--path", help="a folder on --node that holds the model")
    add.add_argument("--description")
    add.set_defaults(run=models_add)

    rm = add_command(models, "rm", "remove a model (refused while a deployment uses it)")
    name_argument(rm, completer="models", help="the model's name (or id)")
    rm.set_defaults(run=models_rm)


def nodes_ls(args) -> int:
    with connect() as client:
        nodes = list(client.pages("/nodes/"))
    rows = [
        [
            n["name"],
            n.get("status", ""),
            n.get("address") or "",
            n.get("transport", ""),
            len(n.get("npus") or []),
            "yes" if n.get("cordoned") else "",
            output.age(n.get("last_heartbeat")),
        ]
        for n in nodes
    ]
    headers = ["NAME", "STATUS", "ADDRESS", "TRANSPORT", "NPUS", "CORDONED", "HEARTBEAT"]
    return _print(nodes, args.output, rows, headers, "nodes")


def models_ls(args) -> int:
    with connect() as client:
        models = list(client.pages("/models/"))
    rows = []
    for m in models:
        copies = m.get("artifacts") or []
        where = ", ".join(
            f"{a['node']}:{a['path']}" + ("" if a.get("ready") else " (not ready)") for a in copies
        )
        rows.append([m["name"], m.get("source", ""), m.get("repo_id") or "", where])
    return _print(models, args.output, rows, ["NAME", "SOURCE", "REPO", "COPIES"], "models")


def _print(items, fmt, rows, headers, what) -> int:
    if not items and fmt == "table":
        output.note(f"No {what}.")
        return 0
    names = [item["name"] for item in items]
    text = output.render(items, fmt, rows=rows, headers=headers, names=names)
    if text:
        print(text)
    return 0


def models_add(args) -> int:
    if bool(args.repo) == bool(args.path):
        raise UsageError("Give either --repo (a hub id) or --node and --path (a folder on a node).")
    if args.path and not args.node:
        raise UsageError("--path needs --node: the node that holds the folder.")
    given = {
        "repo_id": args.repo,
        "revision": args.revision,
        "node": args.node,
        "path": args.path,
        "description": args.description,
    }
    # Only what was given: the strict API refuses fields it does not know, so send no empty extras.
    body = {"source": args.source if args.repo else "local", **{k: v for k, v in given.items() if v}}
    with connect() as client:
        response = client.request("PUT", f"/models/{path_of(args.name)}/", json=body)
    answer = response.json()
    result = answer.get("result") or ("created" if response.status_code == 201 else "updated")
    print(f"{args.name}: {result}")
    return 0


def models_rm(args) -> int:
    with connect() as client:
        client.request("DELETE", f"/models/{path_of(args.name)}/")
    print(f"{args.name}: deleted")
    return 0
