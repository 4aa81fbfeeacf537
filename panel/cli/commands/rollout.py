"""`rollout status NAME` and `rollout undo NAME`, as kubectl's: wait until the deployment's rollout is done,
and apply again the spec it had before the last apply that changed it (`POST …/rollback/`)."""

import time

from panel.cli import output
from panel.cli.client import ApiError, connect
from panel.cli.commands import add_command, add_group, name_argument, output_option, timeout_option
from panel.cli.commands.apply import result_line
from panel.cli.durations import describe
from panel.cli.errors import FAILED, TIMEOUT, CliError
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

Applies again the spec the deployment had before the last apply that changed it, with the same plan,
diff and effect as apply (a serving deployment rolls). Undoing twice returns to where it was. Exit 1
when nothing was applied to it since it was made."""


def register(commands) -> None:
    rollout = add_group(commands, "rollout", "follow or roll back a deployment's rollout")
    status = add_command(
        rollout, "status", "wait until the deployment's rollout is done", epilog=STATUS_EPILOG
    )
    name_argument(status)
    timeout_option(status)
    status.set_defaults(run=status_command)

    undo = add_command(rollout, "undo", "roll back to the previous spec", epilog=UNDO_EPILOG)
    name_argument(undo)
    undo.add_argument("--dry-run", action="store_true", help="show what would change, change nothing")
    undo.add_argument(
        "--idempotency-key", metavar="KEY", help="send Idempotency-Key KEY: a retried job rolls back once"
    )
    output_option(undo, formats=("text", "json", "yaml"), default="text")
    undo.set_defaults(run=undo_command)


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
        count = deployment.get("replicas_wanted") or 1 + len(replicas)  # the spec's; rows beyond are surges
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


def undo_command(args) -> int:
    params = {"dry_run": "true"} if args.dry_run else None
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else {}
    with connect() as client:
        deployment = client.deployment(args.name)
        try:
            response = client.request(
                "POST", f"/deployments/{deployment['id']}/rollback/", params=params, headers=headers
            )
        except ApiError as error:
            if error.status == 404 and client.find_deployment(args.name) is not None:
                raise CliError(
                    "This panel has no rollback (POST /api/v1/deployments/{id}/rollback/); upgrade it, or "
                    "apply the earlier spec file again."
                ) from None
            raise
    answer = response.json()
    if args.output != "text":
        print(output.render(answer, args.output))
        return 0
    print(result_line(args.name, answer), flush=True)
    if answer.get("result") != "unchanged":
        for warning in answer.get("warnings") or []:
            output.warn(f"{args.name}: {output.message_of(warning)}")
    return 0
