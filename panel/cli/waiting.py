"""Waiting for a deployment to reach running, stopped or deleted, on the client: over the panel's
`?watch=true` event stream where it has one, else by polling its detail every POLL_S. (Apply and delete
ask the panel itself to wait instead, `?wait=`; this is `ascend-panel wait`.)"""

import time
from collections.abc import Iterator

import httpx

from panel.cli import output
from panel.cli.client import ApiError, Client, Resume, WatchUnsupported
from panel.cli.durations import describe
from panel.cli.errors import FAILED, TIMEOUT, CliError

TARGETS = ("running", "stopped", "deleted")
POLL_S = 2.0
# The panel sends a keepalive every 15 s: twice that without a byte means the stream is dead; reconnect.
SILENCE_S = 30.0


def wait_for(client: Client, name: str, target: str, timeout: float) -> dict | None:
    """The deployment once it is `target` (None once deleted). CliError exiting 1 when it failed or cannot
    get there any more, exiting 3 when `timeout` seconds ran out first."""
    deadline = time.monotonic() + timeout
    first = client.find_deployment(name)
    if first is None and target != "deleted":
        raise CliError(f"No deployment named {name!r}.")
    last_status = None
    seen: set[str | None] = set()
    seen_rollout: set = set()
    # A rollout that was running when the wait began (or began during it) decides the outcome.
    rolled = ((first or {}).get("rollout") or {}).get("status") == "running"
    for deployment in states(client, first, deadline):
        status = "deleted" if deployment is None else deployment.get("status")
        if status != last_status:
            output.note(f"{name}: {status}")
            last_status = status
        rollout = (deployment or {}).get("rollout") or {}
        rolled = rolled or rollout.get("status") == "running"
        if rollout.get("status") == "running" and rollout.get("message") not in seen_rollout:
            seen_rollout.add(rollout.get("message"))
            output.note(
                f"{name}: rolling {rollout.get('done')}/{rollout.get('total')}: {rollout.get('message')}"
            )
        if status == target and target == "running" and rollout.get("status") == "running":
            continue  # a rolling update runs: wait for its outcome
        if status == target and target == "running" and rollout.get("status") == "failed" and rolled:
            raise CliError(f"{name}: the rolling update failed: {rollout.get('message')}", FAILED)
        if status == target:
            return deployment
        _refuse_hopeless(name, target, deployment, started_here=bool(seen - {"unhealthy"}))
        seen.add(status)
    raise CliError(
        f"{name} did not reach {target} within {describe(timeout)} (it is {last_status}).", TIMEOUT
    )


def _refuse_hopeless(name: str, target: str, deployment: dict | None, started_here: bool) -> None:
    """Fail at once, rather than at the timeout, when the deployment cannot reach `target` any more: it was
    deleted, is being stopped, failed, or (as the panel's own wait judges) turned unhealthy after a start
    this wait saw. Unhealthy from the outset may still recover by the panel's restarts: keep waiting."""
    if target == "deleted":
        return
    if deployment is None:
        raise CliError(f"{name} was deleted before it reached {target}.")
    status = deployment.get("status")
    if target == "running" and (status == "failed" or (status == "unhealthy" and started_here)):
        reason = deployment.get("reason_display") or deployment.get("reason") or "no reason given"
        raise CliError(f"{name} failed: {reason}", FAILED, details=output.failure_lines(deployment))
    if target == "running" and deployment.get("desired_state") in ("stopped", "deleted"):
        raise CliError(f"{name} is being {deployment['desired_state']}; it will not reach running.")


def states(client: Client, first: dict | None, deadline: float) -> Iterator[dict | None]:
    """The deployment as it changes (None once gone), until the deadline passes."""
    yield first
    if first is None:
        return
    path = f"/deployments/{first['id']}/"
    resume = Resume()  # after a dropped connection: what changed since the last event read
    watching = True
    while deadline - time.monotonic() > 0:
        if watching:
            watching = yield from _watched(client, path, deadline, resume)
            if watching is None:
                return
            continue
        time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
        try:
            yield client.get(path)
        except ApiError as error:
            if error.status != 404:
                raise
            yield None
            return


def _watched(client: Client, path: str, deadline: float, resume: Resume):
    """Yield the deployment from one connection of its event stream; then None when the wait is over (gone,
    or the deadline passed), True to connect again, False to poll (a panel without `?watch`)."""
    remaining = deadline - time.monotonic()
    try:
        for event, data in client.events(path, read_timeout=min(remaining, SILENCE_S), resume=resume):
            if event == "deleted":
                yield None
                return None
            if event == "deployment":
                yield data
            if time.monotonic() >= deadline:
                return None
    except WatchUnsupported:
        return False
    except httpx.TimeoutException:
        return True
    except ApiError as error:
        if error.status != 404:
            raise
        yield None
        return None
    return True  # the panel closed the stream (a restart, say): watch again
