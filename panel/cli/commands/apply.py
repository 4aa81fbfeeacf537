"""`plan -f` and `apply -f`: a spec file, or a folder of them (docs/cli.md), made real with PUT
/api/v1/deployments/{name}/. Several specs are applied one by one, each reported; one that fails does not
stop the others, and the exit code says that something failed."""

import json
import os
import time

from panel.cli import output
from panel.cli.client import WAIT_MARGIN_S, ApiError, Client, Unreachable, connect, path_of
from panel.cli.commands import add_command, file_option, output_option, timeout_option
from panel.cli.commands.deployments import server_wait
from panel.cli.errors import FAILED, TIMEOUT, CliError
from panel.cli.locking import change_params, in_turn, lock_option
from panel.cli.specs import Spec, read_sources, read_specs

IDEMPOTENCY_ENV = "ASCEND_PANEL_IDEMPOTENCY_KEY"

APPLY_EPILOG = f"""\
examples:
  ascend-panel apply -f qwen-chat.yaml --wait --timeout 10m
  ascend-panel apply -f qwen-chat.yaml --dry-run
  ascend-panel apply -f deploy/ --wait            # every *.yaml, *.yml and *.json in deploy/, by name
  ascend-panel get deployments qwen-chat --spec | ascend-panel apply -f -

Prints, per spec: created, unchanged, or changed: <fields> (<what the change does>), and exits 0.
The planner's warnings go to stderr when the plan changes (created or changed), not when unchanged.
--wait returns once the deployment runs (stopped, for a spec with state: stopped): exit 1 when it fails
first, with its findings and log tail; exit 3 when the timeout runs out. A spec whose path is a folder
the panel did not know answers `waiting` while the folder is inspected: --wait waits for the inspection,
says so, and applies again.
One change at a time per deployment: while another runs (a rolling update, a start or stop, another
pipeline's apply) the panel answers 409 naming it; --wait-for-lock 10m tries again until it is taken.
A change that cannot start a new replica first (no free NPUs) stops serving for a while: the panel
refuses it unless --allow-downtime says that is fine.
--idempotency-key (or {IDEMPOTENCY_ENV}) lets a pipeline that runs twice deploy once: the panel
answers the second run as it answered the first. A file of several specs sends KEY/NAME for each.
A folder (-f DIR) applies each spec file in it in name order (-R: its subfolders' too); a spec that
fails is reported and the others are applied all the same; the exit code is then 1."""

PLAN_EPILOG = """\
Asks the panel's planner about each spec without changing anything: whether it fits, the NPUs, the
engine settings it would use, the command per node and the warnings. `apply --dry-run` shows the diff."""


def register(commands) -> None:
    plan = add_command(commands, "plan", "show how the panel would run a spec", epilog=PLAN_EPILOG)
    file_option(plan)
    recursive_option(plan)
    output_option(plan, formats=("table", "json", "yaml"))
    plan.set_defaults(run=plan_command)

    apply = add_command(commands, "apply", "make deployments look like a spec file", epilog=APPLY_EPILOG)
    file_option(apply)
    recursive_option(apply)
    apply.add_argument("--dry-run", action="store_true", help="show what would change, change nothing")
    apply.add_argument("--wait", action="store_true", help="return once the deployment runs (or stopped)")
    timeout_option(apply, "wait with --wait")
    apply.add_argument(
        "--idempotency-key",
        default=os.environ.get(IDEMPOTENCY_ENV) or None,
        metavar="KEY",
        help=f"send Idempotency-Key KEY (default: ${IDEMPOTENCY_ENV})",
    )
    lock_option(apply)
    output_option(apply, formats=("text", "json", "yaml"), default="text")
    apply.set_defaults(run=apply_command)


def recursive_option(parser) -> None:
    parser.add_argument(
        "-R", "--recursive", action="store_true", help="with -f DIR: the spec files of its subfolders too"
    )


def plan_command(args) -> int:
    specs = read_specs(args.file, args.recursive)
    with connect() as client:
        reviews = [client.request("POST", "/deployments/plan/", json=spec).json() for spec in specs]
    if args.output != "table":
        print(output.render(reviews if len(reviews) > 1 else reviews[0], args.output))
        return 0
    for spec, review in zip(specs, reviews, strict=True):
        print("\n".join(plan_lines(str(spec["name"]), review)))
    return 0


def plan_lines(name: str, review: dict) -> list[str]:
    plan = review.get("plan") or {}
    fits = "fits" if review.get("fits") else "does not fit"
    lines = [f"{name}: {fits}" + (f" ({review['chip']})" if review.get("chip") else "")]
    settings = [
        f"{key} {plan[key]}"
        for key in ("tensor_parallel_size", "data_parallel_size", "max_model_len", "dtype", "quantization")
        if plan.get(key) is not None
    ]
    if settings:
        lines.append("  engine: " + ", ".join(settings))
    if plan.get("kv_cache_tokens") is not None:
        lines.append(
            f"  kv cache: {plan['kv_cache_tokens']} tokens, {plan.get('max_concurrent_seqs')} sequences"
        )
    for node in review.get("nodes") or []:
        npus = ", ".join(str(n) for n in node.get("logic_ids") or [])
        lines.append(f"  {node['node']} NPUs {npus}: {node.get('command', '')}")
    lines += [f"  warning: {output.message_of(w)}" for w in review.get("warnings") or []]
    return lines


def failed_rollout(name: str, answer: dict) -> None:
    """Exit 1 when the rolling update this apply started ended failed (the panel's wait answers 200 then:
    the deployment runs, on its old launch)."""
    started = answer.get("rollout") or {}
    latest = (answer.get("deployment") or {}).get("rollout") or {}
    if started and latest.get("id") == started.get("id") and latest.get("status") == "failed":
        raise CliError(f"{name}: the rolling update failed: {latest.get('message')}", FAILED)


def apply_command(args) -> int:
    specs = read_sources(args.file, args.recursive)
    wait_seconds = server_wait(args.timeout) if args.wait and not args.dry_run else None
    several = len(specs) > 1
    answers, failures = [], []
    with connect() as client:
        for spec in specs:
            try:
                answers.append(apply_spec(client, spec.body, args, wait_seconds, several))
            except CliError as error:
                if not several or not _about_the_spec(error):
                    raise  # one spec, or a panel that cannot be reached or refuses the token: stop here
                failures.append(error)
                answers.append({"name": spec.name, "source": spec.source, "error": _error_body(error)})
                _report(spec, error, len({s.source for s in specs}) > 1)
    if args.output != "text":
        print(output.render(answers if several else answers[0], args.output))
    if failures:
        names = ", ".join(answer["name"] for answer in answers if "error" in answer)
        output.note(f"{len(failures)} of {len(specs)} specs failed: {names}")
        codes = {error.code for error in failures}
        return codes.pop() if len(codes) == 1 else FAILED  # all timed out: 3, as one wait says
    return 0


def apply_spec(client: Client, spec: dict, args, wait_seconds: int | None, several: bool) -> dict:
    """Apply one spec, print its lines (text output) and return the panel's answer."""
    name = str(spec["name"])
    key = args.idempotency_key
    if key and several:
        key = f"{key}/{name}"  # the panel binds a key to one body
    started = time.monotonic()
    answer = in_turn(
        lambda: apply_one(
            client, spec, dry_run=args.dry_run, wait_seconds=wait_seconds, key=key, extra=change_params(args)
        ),
        getattr(args, "wait_for_lock", None),
        name,
    )
    if answer.get("result") == "waiting" and wait_seconds is not None:
        answer = apply_after_inspection(client, spec, answer, args, started, key)
    if args.output == "text":
        # Flushed per spec: a CI log shows each deployment's line as it is done, not at the end.
        print(result_line(name, answer), flush=True)
        if wait_seconds is not None and isinstance(answer.get("deployment"), dict):
            print(f"{name}: {answer['deployment'].get('status')}", flush=True)
        # The planner's warnings are about a plan being made: an unchanged deployment keeps its plan, and
        # repeating them on every apply of the same file only teaches people to skip them.
        if answer.get("result") != "unchanged":
            for warning in answer.get("warnings") or []:
                output.warn(f"{name}: {output.message_of(warning)}")
    if wait_seconds is not None:
        failed_rollout(name, answer)
    return answer


def _about_the_spec(error: CliError) -> bool:
    """An answer about this spec (refused, failed, timed out), not a panel out of reach or a token refused:
    after those the next spec would fail the same way."""
    if isinstance(error, ApiError):
        return error.status != 401
    return not isinstance(error, Unreachable)


def _error_body(error: CliError) -> dict:
    body = {"detail": error.message, "exit_code": error.code}
    if isinstance(error, ApiError):
        body["status"] = error.status
        if error.body.get("errors"):
            body["errors"] = error.body["errors"]
    return body


def _report(spec: Spec, error: CliError, name_the_file: bool) -> None:
    """The failure of one spec of several, as main() reports one: `error:` and the details, on stderr."""
    where = f"{spec.name} ({spec.source})" if name_the_file else spec.name
    first, *rest = output.error_lines(error.message, getattr(error, "body", None))
    if not error.message.startswith(f"{spec.name}:"):
        first = f"error: {where}: {error.message}"
    for line in [first, *rest, *error.details]:
        output.note(line)


def apply_one(
    client: Client,
    spec: dict,
    *,
    dry_run: bool,
    wait_seconds: int | None,
    key: str | None,
    extra: dict | None = None,
) -> dict:
    params = dict(extra or {})
    if dry_run:
        params["dry_run"] = "true"
    elif wait_seconds is not None:
        params.update(wait="stopped" if spec.get("state") == "stopped" else "running", timeout=wait_seconds)
    headers = {"Idempotency-Key": key} if key else {}
    timeout = wait_seconds + WAIT_MARGIN_S if wait_seconds is not None else None
    path = f"/deployments/{path_of(str(spec['name']))}/"
    return client.request("PUT", path, json=spec, params=params, headers=headers, timeout=timeout).json()


def apply_after_inspection(client: Client, spec: dict, answer: dict, args, started: float, key) -> dict:
    """The panel registered the spec's folder and inspects it: wait for that, then apply again (with a key
    of its own: the first key's answer is the `waiting` one)."""
    name, operation = str(spec["name"]), answer["inspection"]
    if args.output == "text":
        print(f"{name}: waiting for the inspection of its model (operation {operation})", flush=True)
    deadline = started + args.timeout
    while True:
        found = client.get(f"/operations/{operation}/")
        if found.get("status") == "succeeded":
            break
        if found.get("status") in ("failed", "cancelled"):
            details = [found["hint"]] if found.get("hint") else []
            raise CliError(f"{name}: the inspection of its model {found['status']}: {found.get('error')}",
                           FAILED, details)  # fmt: skip
        if time.monotonic() >= deadline:
            raise CliError(f"{name}: the inspection of its model did not end within --timeout", TIMEOUT)
        time.sleep(1)
    if args.output == "text":
        print(f"{name}: inspected; applying", flush=True)
    left = server_wait(max(1.0, deadline - time.monotonic()))
    return apply_one(client, spec, dry_run=False, wait_seconds=left, key=f"{key}/inspected" if key else None)


def send_change(args, action: str, params: dict, body: dict | None, missing: str) -> None:
    """POST …/{action}/ of the deployment `args.name` (waiting its turn as --wait-for-lock says, with
    --idempotency-key), then print what changed; `missing` is the advice when this panel lacks the action."""
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else {}
    with connect() as client:
        deployment = client.deployment(args.name)
        path = f"/deployments/{deployment['id']}/{action}/"
        try:
            response = in_turn(
                lambda: client.request("POST", path, params=params, headers=headers, json=body),
                args.wait_for_lock,
                args.name,
            )
        except ApiError as error:
            if error.status == 404 and client.find_deployment(args.name) is not None:
                raise CliError(
                    f"This panel has no {action} (POST /api/v1/deployments/{{id}}/{action}/); {missing}"
                ) from None
            raise
    print_change(args.name, response.json(), args.output)


def print_change(name: str, answer: dict, fmt: str) -> None:
    """What a change (undo, scale) answered: the answer in `fmt`, or its result line and its warnings."""
    if fmt != "text":
        print(output.render(answer, fmt))
        return
    print(result_line(name, answer), flush=True)
    if answer.get("result") != "unchanged":
        for warning in answer.get("warnings") or []:
            output.warn(f"{name}: {output.message_of(warning)}")


def result_line(name: str, answer: dict) -> str:
    """`name: created`, `name: unchanged`, `name: changed: engine.max_model_len, replicas (restart)`; a dry
    run says so, and a wait adds the state reached."""
    result = answer.get("result", "")
    if result == "changed":
        fields = ", ".join(change_field(change) for change in answer.get("changes") or [])
        effect = answer.get("effect")
        result = f"changed: {fields}" + (f" ({effect})" if effect else "")
    line = f"{name}: {result}"
    if answer.get("dry_run"):
        line += " (dry run)"
        for change in answer.get("changes") or []:
            line += f"\n  {change_field(change)}: {_value(change.get('from'))} -> {_value(change.get('to'))}"
        for step in answer.get("steps") or []:  # a deployment with roles: what each engine would do
            role = f" ({step['role']})" if step.get("role") else ""
            line += f"\n  {step.get('action')} {step.get('name')}{role}"
    return line


def change_field(change: dict) -> str:
    """`replicas`, or `decode replicas` (`decode autoscale`) for a line about one role of a disaggregated
    deployment; a field that names its role already (`roles.decode.engine.max_model_len`) as it is."""
    field = change.get("field", "?")
    return f"{change['role']} {field}" if change.get("role") and not field.startswith("roles.") else field


def _value(value) -> str:
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else str(value)
