"""Asking before running (workers.asking): the panel's answer reaches the thread that asked; with no
answer, the agent asks again a bounded number of times and then runs nothing (None)."""

import threading

from workers import asking


def test_the_answer_reaches_the_asking_thread(monkeypatch):
    asks = []

    def panel(task_name, question, signer=None):  # answers from another thread, as the agent's pool does
        asks.append(question)
        answer = {**question, "wanted": False, "ended": True, "reason": "the operation ended failed"}
        threading.Timer(0.05, asking.receive_answer, [answer]).start()

    monkeypatch.setattr(asking, "send_to_panel", panel)
    verdict = asking.still_wanted("op-1", "node-a", 2)
    assert verdict == asking.Verdict(False, "the operation ended failed", ended=True)
    assert asks[0]["dispatch"] == 2


def test_without_an_answer_it_asks_a_bounded_number_of_times_then_gives_up(monkeypatch):
    asks = []
    monkeypatch.setattr(
        asking, "send_to_panel", lambda task_name, question, signer=None: asks.append(question)
    )
    assert asking.still_wanted("op-1", "node-a", 1, timeout_s=0.01) is None
    assert len(asks) == asking.ASK_TRIES
    assert len({ask["ask"] for ask in asks}) == 1  # one question asked again, answerable by any reply


def test_an_answer_for_another_operation_or_nobody_is_dropped():
    assert not asking.receive_answer({"ask": "nobody-asked", "operation_id": "op-1", "wanted": True})
