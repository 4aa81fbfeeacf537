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
    assert asking.still_wanted("op-bounded", "node-a", 1, timeout_s=0.01) is None
    # Only this operation's asks: a thread another test left asking (10 s per ask) can land here too.
    asks = [ask for ask in asks if ask["operation_id"] == "op-bounded"]
    assert len(asks) == asking.ASK_TRIES
    assert len({ask["ask"] for ask in asks}) == 1  # one question asked again, answerable by any reply


def test_an_answer_for_another_operation_or_nobody_is_dropped():
    assert not asking.receive_answer({"ask": "nobody-asked", "operation_id": "op-1", "wanted": True})


class FakeMessage:
    def __init__(self, body, task_id="t-1"):
        self.body, self.headers, self.acked = body, {"id": task_id, "task": "agent.still_wanted_answer"}, 0

    def decode(self):
        if isinstance(self.body, Exception):
            raise self.body
        return self.body

    def ack_log_error(self, logger, errors):
        self.acked += 1


class FakeTask:
    def __init__(self):
        self.applied = []

    def apply(self, args=None, kwargs=None, task_id=None):
        self.applied.append((args, kwargs, task_id))


def test_the_consumer_runs_an_answer_itself_with_its_task_id_and_acknowledges_it():
    task, message = FakeTask(), FakeMessage([[], {"answer": {"ask": "a1"}, "_auth": "signed"}, {}])
    asking.answer_handler(task)(message, None, ack=None, reject=None, callbacks=None)
    assert task.applied == [([], {"answer": {"ask": "a1"}, "_auth": "signed"}, "t-1")]
    assert message.acked == 1


def test_an_answer_that_cannot_be_decoded_is_acknowledged_and_does_not_stop_the_consumer():
    task, message = FakeTask(), FakeMessage(ValueError("not json"))
    asking.answer_handler(task)(message, None, ack=None, reject=None, callbacks=None)
    assert task.applied == []
    assert message.acked == 1
