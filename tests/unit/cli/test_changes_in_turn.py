"""One change at a time from the CLI, against a local server answering as the API documents: `apply
--wait-for-lock` tries again after a 409 (another change runs) until it is taken, a 409 that asks for
--allow-downtime is not retried, `--allow-downtime` is sent, and `rollout history` / `undo --to-revision`
read and apply revisions."""

import pytest

from panel.cli import locking
from panel.cli.main import main
from tests.unit.cli.api_server import Answer, deployment, page

PUT = "/api/v1/deployments/qwen-chat/"
LIST = "/api/v1/deployments/"
REVISIONS = "/api/v1/deployments/7/revisions/"
ROLLBACK = "/api/v1/deployments/7/rollback/"
RESTART = "/api/v1/deployments/7/restart/"
BUSY = {"detail": "A rolling update of qwen-chat is under way (rollout 9 by ci): one change at a time."}
DOWNTIME = {
    "detail": "allow_downtime: This change stops serving qwen-chat for about 40 s.",
    "errors": {"allow_downtime": ["This change stops serving qwen-chat for about 40 s."]},
}


@pytest.fixture(autouse=True)
def quick_pauses(monkeypatch):
    monkeypatch.setattr(locking, "FIRST_PAUSE_S", 0.01)


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "qwen-chat.yaml"
    path.write_text("name: qwen-chat\nmodel: qwen\nengine: {max_model_len: 4096}\n")
    return str(path)


def changed() -> dict:
    change = {"field": "engine.max_model_len", "from": 2048, "to": 4096}
    return {"result": "changed", "dry_run": False, "changes": [change], "effect": "rolling",
            "deployment": deployment(), "plan": {}, "warnings": []}  # fmt: skip


def test_apply_waits_its_turn_when_another_change_runs(api, spec_file, capsys):
    api.on("PUT", PUT, Answer(409, BUSY), Answer(409, BUSY), Answer(202, changed()))
    assert main(["apply", "-f", spec_file, "--wait-for-lock", "1m"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "qwen-chat: changed: engine.max_model_len (rolling)\n"
    assert captured.err.count("under way (rollout 9 by ci") == 2
    assert len(api.sent("PUT", PUT)) == 3


def test_without_wait_for_lock_the_409_is_the_answer(api, spec_file, capsys):
    api.on("PUT", PUT, Answer(409, BUSY))
    assert main(["apply", "-f", spec_file]) == 1
    assert "one change at a time" in capsys.readouterr().err
    assert len(api.sent("PUT", PUT)) == 1


def test_a_refusal_asking_for_allow_downtime_is_not_retried(api, spec_file, capsys):
    api.on("PUT", PUT, Answer(409, DOWNTIME), Answer(202, changed()))
    assert main(["apply", "-f", spec_file, "--wait-for-lock", "1m"]) == 1
    assert "stops serving qwen-chat for about 40 s" in capsys.readouterr().err
    assert len(api.sent("PUT", PUT)) == 1
    api.on("PUT", PUT, Answer(202, changed()))
    assert main(["apply", "-f", spec_file, "--allow-downtime"]) == 0
    assert api.sent("PUT", PUT)[-1].query == {"allow_downtime": "true"}


def revision(number, cause="apply", restored=None, outcome="succeeded", changes=()):
    return {"number": number, "created": "2026-12-06T10:00:00Z", "user": "bob", "cause": cause,
            "restored": restored, "effect": "rolling", "changes": list(changes), "outcome": outcome,
            "message": "", "message_display": "", "rollout": None,
            "spec": {"name": "qwen-chat", "engine": {"max_model_len": 1024 * number}}}  # fmt: skip


def test_history_lists_the_revisions_and_prints_one_spec(api, capsys):
    api.on("GET", LIST, Answer(200, page(deployment())))
    history = [
        revision(3, "rollback", restored=1, outcome="in_progress"),
        revision(2, changes=[{"field": "engine.max_model_len", "from": 1024, "to": 2048}]),
        revision(1, "create"),
    ]
    api.on("GET", REVISIONS, Answer(200, {"deployment": "qwen-chat", "results": history}))
    assert main(["rollout", "history", "qwen-chat"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["REVISION", "AGE", "USER", "CAUSE", "CHANGES", "EFFECT", "OUTCOME"]
    assert "rollback to 1" in lines[1]
    assert lines[1].rstrip().endswith("in progress")
    assert "engine.max_model_len" in lines[2]
    assert main(["rollout", "history", "qwen-chat", "--revision", "2"]) == 0
    assert "max_model_len: 2048" in capsys.readouterr().out
    assert main(["rollout", "history", "qwen-chat", "--revision", "5"]) == 1
    assert "has no revision 5 (it has: 3, 2, 1)" in capsys.readouterr().err


def test_undo_to_a_revision_sends_it_with_allow_downtime(api, capsys):
    api.on("GET", LIST, Answer(200, page(deployment())))
    api.on("POST", ROLLBACK, Answer(202, changed()))
    assert main(["rollout", "undo", "qwen-chat", "--to-revision", "2", "--allow-downtime"]) == 0
    (sent,) = api.sent("POST", ROLLBACK)
    assert sent.query == {"to_revision": "2", "allow_downtime": "true"}


def test_rollout_restart_says_it_rolls(api, capsys):
    api.on("GET", LIST, Answer(200, page(deployment())))
    api.on("POST", RESTART, Answer(202, deployment(rollout={"id": 9, "status": "running"})))
    assert main(["rollout", "restart", "qwen-chat"]) == 0
    assert capsys.readouterr().out == "qwen-chat: restarting one replica at a time (rollout 9)\n"
