"""Fault bench: real processes SIGKILLed mid-install, mid-deploy, while serving, mid-delete, on a real panel.

    .venv/bin/python bench/faults.py [--only NAME ...]

Starts one stack on the fleet setup (tests/faults/stack.py: a RabbitMQ node of its own as the broker, each
agent with its node's own broker user; the panel's redis-server with its append-only file, two web servers
behind one address, two panel workers, two beats; one agent per scenario on a simulated Ascend host of its
own) and runs every scenario of tests/faults/scenarios.py on it: an agent, one or both panel workers or web
servers, the leading beat, the panel's Redis, the broker or the engine is killed with SIGKILL and restarted
as systemd would, or the agent is frozen (SIGSTOP) past its deadline and resumed. One JSON line per
scenario, then the summary as the last line: {"scenarios", "survived", "lost_events", "stuck_operations",
"double_runs", "recovery_s_max", "reconnect_s_max" (dashboards back on the other web server after one
died), "beat_takeover_s" (the standby beat leading after the leader died)}.
Without rabbitmq-server the last line is {"skipped": REASON} (exit status 1 under REQUIRE_RABBITMQ=1).
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.faults.broker import rabbitmq_missing
from tests.faults.checks import Outcome
from tests.faults.scenarios import SCENARIOS, all_nodes, run_scenario
from tests.faults.stack import FaultStack


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="scenario names (default: all)")
    args = parser.parse_args()
    chosen = [s for s in SCENARIOS if not args.only or s.name in args.only]
    if missing := rabbitmq_missing():
        print(json.dumps({"skipped": missing}))
        return 1 if os.environ.get("REQUIRE_RABBITMQ") else 0
    started = time.monotonic()
    stack = FaultStack(all_nodes()).start()
    print(f"stack up in {time.monotonic() - started:.1f} s at {stack.dir}", file=sys.stderr, flush=True)
    outcomes: list[Outcome] = []
    try:
        for scenario in chosen:
            try:
                outcome = run_scenario(stack, scenario)
            except AssertionError as error:  # the scenario could not even get to its kill
                outcome = Outcome(scenario.name, scenario.target, scenario.phase, problems=[str(error)])
            outcomes.append(outcome)
            print(json.dumps(outcome.as_dict()), flush=True)
    finally:
        stack.stop()
    recoveries = [o.recovery_s for o in outcomes if o.recovery_s is not None]
    reconnects = [o.details["reconnect_s_max"] for o in outcomes if "reconnect_s_max" in o.details]
    takeovers = [o.details["beat_takeover_s"] for o in outcomes if "beat_takeover_s" in o.details]
    print(
        json.dumps(
            {
                "scenarios": len(outcomes),
                "survived": sum(o.survived for o in outcomes),
                "lost_events": sum(o.lost_events for o in outcomes),
                "stuck_operations": sum(o.stuck_operations for o in outcomes),
                "double_runs": sum(o.double_runs for o in outcomes),
                "recovery_s_max": max(recoveries, default=None),
                "reconnect_s_max": max(reconnects, default=None),
                "beat_takeover_s": max(takeovers, default=None),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
