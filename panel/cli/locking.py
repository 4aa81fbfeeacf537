"""One change at a time per deployment: the panel answers 409 to a change that arrives while another runs
(a rolling update, a start or stop, a change another pipeline applied meanwhile), naming what runs.
`--wait-for-lock DURATION` makes apply, `rollout undo` and `rollout restart` wait their turn: they try
again with a growing pause (1, 2, 4 … 15 s, with jitter so parallel pipelines do not retry in step)
until the change is taken or DURATION has passed. A 409 that waiting cannot cure (the change would stop
serving and needs --allow-downtime) is not retried."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from panel.cli import output
from panel.cli.client import ApiError
from panel.cli.durations import duration

T = TypeVar("T")
FIRST_PAUSE_S = 1.0
LONGEST_PAUSE_S = 15.0


def lock_option(parser) -> None:
    parser.add_argument(
        "--wait-for-lock",
        type=duration,
        default=None,
        metavar="DURATION",
        help="when another change of the deployment runs (409), try again until DURATION has passed "
        "(90s, 10m)",
    )
    parser.add_argument(
        "--allow-downtime",
        action="store_true",
        help="go ahead when the change cannot surge (no free NPUs for a new replica first) and stops serving "
        "for a while",
    )


def waits_its_turn(error: ApiError) -> bool:
    """A 409 that a later try may pass: another change runs. Not one that asks for --allow-downtime."""
    return error.status == 409 and "allow_downtime" not in (error.body.get("errors") or {})


def in_turn(send: Callable[[], T], wait_s: float | None, name: str) -> T:
    """send(), tried again on a 409 while `wait_s` lasts (None: once)."""
    deadline = time.monotonic() + (wait_s or 0)
    pause = FIRST_PAUSE_S
    while True:
        try:
            return send()
        except ApiError as error:
            if wait_s is None or not waits_its_turn(error):
                raise
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            sleep = min(pause * random.uniform(0.75, 1.25), left)
            output.note(f"{name}: {error.message} Trying again in {sleep:.0f} s.")
            time.sleep(sleep)
            pause = min(pause * 2, LONGEST_PAUSE_S)


def change_params(args) -> dict[str, str]:
    return {"allow_downtime": "true"} if getattr(args, "allow_downtime", False) else {}
