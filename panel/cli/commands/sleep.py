"""`sleep NAME [--level 1|2]` and `wake NAME`: put an idle: deployment's engine to sleep, or wake it and
wait until it is awake (operators; recorded as decisions, `events NAME` lists them). `sleep NAME --show`
prints whether it sleeps and when it last woke."""

from panel.cli import output
from panel.cli.client import connect
from panel.cli.commands import add_command, name_argument, output_option

SLEEP_EPILOG = """\
examples:
  ascend-panel sleep qwen-chat             # at the level of its idle: setting
  ascend-panel sleep qwen-chat --level 2   # drop the weights too: frees the most, wakes slower
  ascend-panel sleep qwen-chat --show      # asleep or awake, and its last wake

Only a deployment launched with idle: in its spec can sleep; a request through the gateway wakes it."""

WAKE_EPILOG = """\
examples:
  ascend-panel wake qwen-chat

Waits until the engine says it is awake (vLLM's /is_sleeping), then prints how long it took."""


def register(commands) -> None:
    parser = add_command(commands, "sleep", "put an idle deployment's engine to sleep", epilog=SLEEP_EPILOG)
    name_argument(parser)
    parser.add_argument("--level", type=int, choices=(1, 2), help="vLLM's sleep level (default: its idle:)")
    parser.add_argument("--show", action="store_true", help="only print whether it sleeps")
    output_option(parser, formats=("table", "json", "yaml"))
    parser.set_defaults(run=sleep_command)
    parser = add_command(commands, "wake", "wake a sleeping deployment's engine", epilog=WAKE_EPILOG)
    name_argument(parser)
    output_option(parser, formats=("table", "json", "yaml"))
    parser.set_defaults(run=wake_command)


def sleep_command(args) -> int:
    with connect() as client:
        deployment = client.deployment(args.name)
        path = f"/deployments/{deployment['id']}/sleep/"
        if args.show:
            answer = client.get(path)
        else:
            body = {"level": args.level} if args.level else {}
            answer = client.request("POST", path, json=body).json()
    return _print(answer, args.output)


def wake_command(args) -> int:
    with connect() as client:
        deployment = client.deployment(args.name)
        # A level-2 wake loads the weights again: give it the panel's whole wait.
        answer = client.request("POST", f"/deployments/{deployment['id']}/wake/", json={}, timeout=400).json()
    return _print(answer, args.output)


def _print(answer: dict, fmt: str) -> int:
    if fmt != "table":
        print(output.render(answer, fmt))
        return 0
    name = answer.get("deployment", "")
    if answer.get("sleep") is None:
        print(f"{name}: cannot sleep (no idle: when it was launched)")
        return 0
    level = f" (level {answer['level']})" if answer.get("level") else ""
    woke = f"; last woke {output.age(answer['last_wake'])} ago" if answer.get("last_wake") else ""
    took = f"; woke in {answer['wake_s']:.1f} s" if answer.get("wake_s") is not None else ""
    print(f"{name}: {answer['sleep']}{level}{woke}{took}")
    return 0
