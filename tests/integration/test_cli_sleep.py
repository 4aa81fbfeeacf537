"""`ascend-panel sleep NAME` / `wake NAME` as the CLI runs them (main(), in this process) against a real web
server (tests/live_web.py) and a real sim engine on the deployment's port (tests/integration/
test_sleep_wake.py's fixtures): the engine sleeps and wakes, the output says so; a viewer's CLI is refused."""

import json

import httpx
import pytest

from panel.accounts.models import ApiToken
from panel.cli.main import main
from tests.integration.test_sleep_wake import node, sleepy  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]


def _as(user, live_web, monkeypatch, tmp_path):
    monkeypatch.setenv("ASCEND_PANEL_URL", live_web.url)
    monkeypatch.setenv("ASCEND_PANEL_TOKEN", ApiToken.issue(user, f"cli-{user.username}")[1])
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.delenv("ASCEND_PANEL_IDEMPOTENCY_KEY", raising=False)


def test_sleep_and_wake_from_the_cli(live_web, sleepy, bob, charlie, monkeypatch, tmp_path, capsys):  # noqa: F811
    _deployment, url, _process = sleepy
    _as(charlie, live_web, monkeypatch, tmp_path)
    assert main(["sleep", "sleepy"]) == 1  # a viewer may look, not act
    capsys.readouterr()
    assert main(["sleep", "sleepy", "--show"]) == 0
    assert capsys.readouterr().out.strip() == "sleepy: awake"

    _as(bob, live_web, monkeypatch, tmp_path)
    assert main(["sleep", "sleepy", "--level", "1"]) == 0
    assert capsys.readouterr().out.strip() == "sleepy: asleep (level 1)"
    assert httpx.get(f"{url}/is_sleeping").json() == {"is_sleeping": True}

    assert main(["wake", "sleepy", "-o", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert (answer["sleep"], answer["level"]) == ("awake", None)
    assert answer["wake_s"] > 0
    assert httpx.get(f"{url}/is_sleeping").json() == {"is_sleeping": False}

    assert main(["events", "sleepy", "-o", "json"]) == 0
    kinds = [event["kind"] for event in json.loads(capsys.readouterr().out)["results"]]
    assert kinds[:2] == ["wake", "sleep"]
