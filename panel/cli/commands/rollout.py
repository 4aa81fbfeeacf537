"""`rollout status|history|undo|restart NAME`, as kubectl's: wait until the deployment's rollout is done,
list its revisions (`GET …/revisions/`), apply again the spec it had before the last apply that changed it
or revision N (`POST …/rollback/`), and restart its replicas one at a time (`POST …/restart/`)."""

import time

from panel.cli import output
from panel.cli.client import connect
from panel.cli.commands import add_command, add_group, name_argument, output_option, timeout_option
from panel.cli.commands.apply import change_field, send_change
from panel.cli.durations import describe
from panel.cli.errors import FAILED, TIMEOUT, CliError
from panel.cli.locking import change_params, in_turn, lock_option
from panel.cli.waiting import states

STATUS_EPILOG = """\
examples:
  ascend-panel apply -f qwen-chat.yaml && ascend-panel rollout status qwen-chat --timeout 15m
  ascend-panel rollout status qwen-chat

Done when the deployment runs with every replica its spec asks for and no rolling update is under way
(stopped, for a spec with state: stopped). Exit 0 done, 1 failed (the rolling update failed, the
deployment or a replica failed, or it is being deleted), 3 when --timeout runs out. A rolling update
that failed stays the answer until the next apply starts another (the old replicas serve on meanwhile)."""

UNDO_EPILOG = """\
examples:
  ascend-panel rollout undo qwen-chat --dry-run
  ascend-panel rollout undo qwen-chat && ascend-panel rollout status qwen-chat

Applies again the spec the deployment had before the last apply that changed it (or revision N of
`rollout history`, with --to-revision N), with the same plan, diff and effect as apply (a serving
deployment rolls: a new replica first where NPUs allow). Undoing twice returns to where it was; each undo
is a revision of its own. Exit 1 when nothing was applied to it since it was made, or when the change
would stop serving and --allow-downtime was not given."""

HISTORY_EPILOG = """\
examples:
  ascend-panel rollout history qwen-chat
  ascend-panel rollout history qwen-chat --revision 3      # that revision's spec, as apply takes it

Every spec applied to the deployment, numbered: who applied it, when, what changed, what it did and how
it ended (succeeded, failed, in progress, superseded)."""

RESTART_EPILOG = """\
examples:
  ascend-panel rollout restart qwen-chat && ascend-panel rollout status qwen-chat

Restarts every replica one at a time, each after a new one serves where NPUs allow (a surge), so the
deployment keeps serving. Without free NPUs for a surge, a deployment of one replica stops serving while
it restarts: the panel refuses that unless --allow-downtime is given."""


def register(commands) -> None:
    rollout = add_group(commands, "rollout", "follow or roll back a deployment's rollout")
    status = add_command(
        rollout, "status", "wait until the deployment's rollout is done", epilog=STATUS_EPILOG
    )
    name_argument(status)
    timeout_option(status)
    status.set_defaults(run=status_command)

    history = add_command(rollout, "history", "list the deployment's revisions", epilog=HISTORY_EPILOG)
    name_argument(history)
    history.add_argument("--revision", type=int, metavar="N", help="print revision N's spec")
    output_option(history, formats=("table", "json", "yaml"))
    history.set_defaults(run=history_command)

    undo = add_command(rollout, "undo", "roll back to the previous spec", epilog=UNDO_EPILOG)
    name_argument(undo)
    undo.add_argument(
        "--to-revision", type=int, metavar="N", help="roll back to revision N (rollout history)"
    )
    undo.add_argument("--dry-run", action="store_true", help="show what would change, change nothing")
    lock_option(undo)
    undo.add_argument(
        "--idempotency-key", metavar="KEY", help="send Idempotency-Key KEY: a retried job rolls back once"
    )
    output_option(undo, formats=("text", "json", "yaml"), default="text")
    undo.set_defaults(run=undo_command)

    restart = add_command(rollout, "restart", "restart the replicas one at a time", epilog=RESTART_EPILOG)
    name_argument(restart)
    lock_option(restart)
    restart.set_defaults(run=restart_command)


def status_command(args) -> int:
    deadline = time.monotonic() + args.timeout
    with connect() as client:
        first = client.deployment(args.name)
        progress = Progress(args.name)
        for deployment in states(client, first, deadline):
            done = progress.verdict(deployment)
            if done:
                print(done)
                return 0
    raise CliError(
        f"{args.name}: the rollout did not finish within {describe(args.timeout)} ({progress.last}).",
        TIMEOUT,
    )


class Progress:
    """What one deployment's states say about its rollout; prints each new step on stderr."""

    def __init__(self, name: str):
        self.name = name
        self.last = "no state read yet"
        self.started = False  # it was starting (or restarting) during this wait: unhealthy then is final

    def verdict(self, deployment: dict | None) -> str | None:
        """The line to print once done; None while under way; CliError once it cannot finish."""
        name = self.name
        if deployment is None:
            raise CliError(f"{name} was deleted before its rollout finished.", FAILED)
        if deployment.get("desired_state") == "deleted":
            raise CliError(f"{name} is being deleted; its rollout will not finish.", FAILED)
        status = deployment.get("status")
        rollout = deployment.get("rollout") or {}
        wanted = "stopped" if deployment.get("desired_state") == "stopped" else "running"
        replicas = [r for r in deployment.get("replicas") or [] if r.get("desired_state") != "deleted"]
        # The spec's count (with roles, every role's: the primary wants 1 of its own); rows beyond: surges.
        count = (
            sum((deployment.get("roles_wanted") or {}).values())
            or deployment.get("replicas_wanted")
            or (1 + len(replicas))
        )
        ready = (status == wanted) + sum(r.get("status") == wanted for r in replicas)
        rolling = rollout.get("status") == "running"
        if rolling:
            replaced = f"{rollout.get('done', 0)}/{rollout.get('total', 0)}"
            step = f"rolling update, {replaced} replaced: {rollout.get('message')}"
        else:
            step = f"{status}, {ready}/{count} replicas {wanted}"
            if 1 + len(replicas) > count:  # a surge or a scale-down still going
                step += f" ({1 + len(replicas) - count} more to remove)"
        self._note(step)
        if rollout.get("status") == "failed":
            raise CliError(
                f"{name}: the rolling update failed: {rollout.get('message')}",
                FAILED,
                details=["  the old replicas serve on; apply a fixed spec, or `ascend-panel rollout undo`"],
            )
        if status in ("starting", "stopping") or rolling:
            self.started = True
        self._refuse_broken(deployment, replicas)
        if not rolling and ready == count == 1 + len(replicas):
            return f"{name}: rolled out: {ready}/{count} replicas {wanted}"
        return None

    def _refuse_broken(self, deployment: dict, replicas: list[dict]) -> None:
        """A failed primary or replica ends the wait at once; unhealthy does too once a start was seen (the
        panel may retry it after a back-off, but what this wait followed did not come up)."""
        broken = ("failed", "unhealthy") if self.started else ("failed",)
        if deployment.get("status") in broken:
            reason = deployment.get("reason_display") or deployment.get("reason") or "no reason given"
            raise CliError(
                f"{self.name} is {deployment['status']}: {reason}", FAILED, output.failure_lines(deployment)
            )
        for replica in replicas:
            if replica.get("status") in broken:
                raise CliError(
                    f"{self.name}: its replica {replica['name']} is {replica['status']} "
                    f"(`ascend-panel describe deployment {replica['name']}` says why).",
                    FAILED,
                )

    def _note(self, step: str) -> None:
        if step != self.last:
            output.note(f"{self.name}: {step}")
            self.last = step


def history_command(args) -> int:
    with connect() as client:
        deployment = client.deployment(args.name)
        answer = client.get(f"/deployments/{deployment['id']}/revisions/")
    revisions = answer.get("results") or []
    if args.revision is not None:
        found = next((r for r in revisions if r.get("number") == args.revision), None)
        if found is None:
            numbers = ", ".join(str(r.get("number")) for r in revisions) or "none"
            raise CliError(f"{args.name} has no revision {args.revision} (it has: {numbers}).")
        print(output.render(found["spec"], "yaml" if args.output == "table" else args.output))
        return 0
    if args.output != "table":
        print(output.render(answer, args.output))
        return 0
    rows = [
        [
            r.get("number"),
            output.age(r.get("created")),
            r.get("user") or "-",
            r.get("cause", "") + (f" to {r['restored']}" if r.get("restored") else ""),
            ", ".join(change_field(change) for change in r.get("changes") or []) or "-",
            r.get("effect") or "-",
            r.get("outcome", "").replace("_", " "),
        ]
        for r in revisions
    ]
    print(output.table(rows, ["REVISION", "AGE", "USER", "CAUSE", "CHANGES", "EFFECT", "OUTCOME"]))
    return 0


def restart_command(args) -> int:
    with connect() as client:
        deployment = client.deployment(args.name)
        path = f"/deployments/{deployment['id']}/restart/"
        answer = in_turn(
            lambda: client.request("POST", path, params=change_params(args)).json(),
            args.wait_for_lock,
            args.name,
        )
    rollout = answer.get("rollout") or {}
    if rollout.get("status") == "running":
        print(f"{args.name}: restarting one replica at a time (rollout {rollout.get('id')})")
    else:
        print(f"{args.name}: restarting")
    return 0


def undo_command(args) -> int:
    params = {"dry_run": "true"} if args.dry_run else {}
    if args.to_revision is not None:
        params["to_revision"] = str(args.to_revision)
    params.update(change_params(args))
    send_change(args, "rollback", params, None, "upgrade it, or apply the earlier spec file again.")
    return 0
