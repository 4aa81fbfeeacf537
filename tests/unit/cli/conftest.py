"""The CLI's unit tests: `api`, a local server answering as the panel's API documents (api_server.py)."""

import pytest

from tests.unit.cli.api_server import ScriptedApi


@pytest.fixture
def api(monkeypatch, tmp_path):
    """The scripted API, with the CLI pointed at it through ASCEND_PANEL_URL / ASCEND_PANEL_TOKEN and its
    config directory in tmp_path."""
    with ScriptedApi() as scripted:
        monkeypatch.setenv("ASCEND_PANEL_URL", scripted.url)
        monkeypatch.setenv("ASCEND_PANEL_TOKEN", "ap_test")
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
        monkeypatch.delenv("ASCEND_PANEL_IDEMPOTENCY_KEY", raising=False)
        monkeypatch.setenv("LANG", "C.UTF-8")
        yield scripted
