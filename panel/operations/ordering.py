"""The agent's order of an operation's events, which is what decides a step's state.

`seq` is where the panel stored an event: batches leave the agent from several threads and a late one is
stored after a newer one, so `seq` is the order of arrival. (`attempt`, `agent_seq`) is the order the agent
emitted them in. A step that asked for a reboot says "failed", then, run again, "skipped": applied in
arrival order a succeeded install showed that step failed. Pure functions over event dicts (the shape of
the events API and of `OperationEvent.as_message`: "attempt", "agent_seq", "kind", "payload").
"""

from collections.abc import Iterable

STOPPED = ("failed", "cancelled")


def agent_order(event: dict) -> tuple[int, int]:
    return int(event.get("attempt") or 0), int(event.get("agent_seq") or 0)


def in_agent_order(events: Iterable[dict]) -> list[dict]:
    return sorted(events, key=agent_order)


def step_states(events: Iterable[dict]) -> dict[str, str]:
    """Each step's last state in the agent's order, steps in the order the agent first reported them."""
    states: dict[str, str] = {}
    for event in in_agent_order(events):
        payload = event.get("payload") or {}
        if event.get("kind") == "log" and payload.get("step") and payload.get("step_state"):
            states[payload["step"]] = payload["step_state"]
    return states


def stopped_at(events: Iterable[dict]) -> str:
    """The step the operation failed at or (cancelled) was about to run: the last one whose final state is
    failed or cancelled; "" when none is."""
    stopped = [step for step, state in step_states(events).items() if state in STOPPED]
    return stopped[-1] if stopped else ""


def last_with(events: Iterable[dict], key: str) -> dict | None:
    """The newest (agent order) log payload that carries `key`, e.g. the install's plan."""
    found = None
    for event in in_agent_order(events):
        payload = event.get("payload") or {}
        if event.get("kind") == "log" and key in payload:
            found = payload
    return found
