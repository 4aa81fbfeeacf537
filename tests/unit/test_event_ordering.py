"""A step's state and where an install stopped follow the agent's numbers, whatever order the panel stored
the events in."""

from panel.operations.ordering import last_with, step_states, stopped_at


def event(attempt, agent_seq, step, state):
    payload = {"line": f"== {step}: {state}", "step": step, "step_state": state}
    return {"attempt": attempt, "agent_seq": agent_seq, "kind": "log", "payload": payload}


# As stored when the batch with 6..7 arrived before the one with 3..5: the panel's order.
ARRIVED = [
    event(1, 6, "reboot", "checking"),
    event(1, 7, "reboot", "skipped"),
    event(1, 3, "reboot", "checking"),
    event(1, 4, "reboot", "running"),
    event(1, 5, "reboot", "failed"),
]


def test_a_late_failed_does_not_undo_a_later_skipped():
    assert step_states(ARRIVED) == {"reboot": "skipped"}
    assert stopped_at(ARRIVED) == ""


def test_a_newer_attempt_wins_over_higher_numbers_of_an_older_one():
    events = [event(2, 1, "venv", "checking"), event(1, 9, "venv", "failed"), event(2, 3, "venv", "failed")]
    events.insert(2, event(2, 2, "venv", "running"))
    assert step_states(reversed(events)) == {"venv": "failed"}
    assert stopped_at([event(2, 1, "venv", "done"), event(1, 9, "venv", "failed")]) == ""


def test_the_install_stopped_at_the_last_step_whose_final_state_is_failed():
    events = [*ARRIVED, event(1, 9, "venv", "failed"), event(1, 8, "venv", "running")]
    assert stopped_at(events) == "venv"


def test_the_plan_is_the_newest_in_the_agents_order():
    plans = [
        {"attempt": 1, "agent_seq": 4, "kind": "log", "payload": {"specs": ["second"]}},
        {"attempt": 1, "agent_seq": 2, "kind": "log", "payload": {"specs": ["first"]}},
        {"attempt": 1, "agent_seq": 3, "kind": "progress", "payload": {"specs": ["not a log line"]}},
    ]
    assert last_with(plans, "specs") == {"specs": ["second"]}
    assert last_with(plans, "steps") is None
