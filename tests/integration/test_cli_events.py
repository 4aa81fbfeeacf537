"""`ascend-panel events NAME` as the CLI runs it (main(), in this process) against a real web server
(tests/live_web.py): the recorded decisions, oldest of the page first, with figures and the reason in the
reader's language; filters; what a deployment with none prints."""

import json

import pytest

from panel.catalog.models import Model
from panel.cli.main import main
from panel.core.domain.choices import DecisionKind
from panel.deployments import decisions, reasons
from panel.deployments.models import Deployment
from tests.live_web import point_cli_at

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.fixture
def cli(live_web, charlie, monkeypatch, tmp_path):
    point_cli_at(live_web, charlie, monkeypatch, tmp_path)


@pytest.fixture
def qwen():
    deployment = Deployment.objects.create(name="qwen", model=Model.objects.create(name="m"))
    decisions.record(deployment, DecisionKind.RESTART, reason="The engine process exited.", outcome="done")
    decision = decisions.record(
        deployment,
        DecisionKind.SCALE_UP,
        reason=[reasons.part("waiting {w}/replica > {t}", w=9.5, t=4)],
        figures={"waiting_per_replica": 9.5, "from": 2.0, "to": 3},
    )
    decisions.settle(decision, "failed", "No free NPU.")
    return deployment


def test_events_prints_the_decisions_oldest_first(cli, qwen, capsys):
    assert main(["events", "qwen"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["AGE", "KIND", "ROLE", "BY", "OUTCOME", "FIGURES", "REASON"]
    assert lines[1].split()[1:6] == ["restart", "-", "leader", "done", "-"]
    assert "from=2 to=3 waiting_per_replica=9.5" in lines[2]
    assert lines[2].endswith("waiting 9.5/replica > 4 — No free NPU.")


def test_events_in_chinese(cli, qwen, capsys, monkeypatch):
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    Deployment.objects.create(name="empty", model=Model.objects.get(name="m"))
    decisions.record(qwen, DecisionKind.GAVE_UP, reason=reasons.gave_up("", 5), outcome="failed")
    assert main(["events", "qwen", "--kind", "gave_up"]) == 0
    assert "重启失败 5 次后已放弃。" in capsys.readouterr().out
    assert main(["events", "empty"]) == 0
    assert capsys.readouterr().out == "empty: no decisions recorded\n"


def test_events_as_json_with_filters(cli, qwen, capsys):
    assert main(["events", "qwen", "--kind", "scale_up", "--role", "plain", "-o", "json"]) == 0
    page = json.loads(capsys.readouterr().out)
    assert [(e["kind"], e["outcome"]) for e in page["results"]] == [("scale_up", "failed")]
    assert main(["events", "qwen", "--limit", "0"]) == 1
    assert "--limit takes 1 to 1000" in capsys.readouterr().err
