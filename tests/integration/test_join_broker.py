"""The broker address an agent gets when it joins: the configured public one (PANEL_AGENT_BROKER_URL), shown
on the Add node page, with a warning when agents on other hosts could not reach it (loopback)."""

import subprocess
import sys

import pytest
from django.test import Client

from tests.conftest import REPO, api_client_for

pytestmark = pytest.mark.django_db

PUBLIC = "redis://panel.example.com:6379/0"


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_join_command_and_the_add_node_page_use_the_configured_broker(alice, settings):
    settings.PANEL_AGENT_BROKER_URL = PUBLIC
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:41234/0"  # make run's embedded Redis, a random port

    body = api_client_for(alice).post("/api/v1/nodes/", {"name": "npu-07"}, format="json").json()
    assert "redis://" not in body["join_command"]  # the address comes with the credential, at the join
    joined = Client().post(
        "/nodes/agent/join/", {"node": "npu-07", "token": body["join_token"]}, content_type="application/json"
    )
    assert joined.json()["broker_url"] == PUBLIC

    page = signed_in(alice).get("/nodes/add/", HTTP_HOST="127.0.0.1").content.decode()
    assert f'data-testid="agent-broker-url">{PUBLIC}<' in page
    assert 'data-testid="agent-broker-warning"' not in page

    joined = signed_in(alice).post(
        "/nodes/add/", {"transport": "agent", "name": "npu-08"}, HTTP_HOST="127.0.0.1"
    )
    html = joined.content.decode()
    assert f'data-testid="agent-broker-url">{PUBLIC}<' in html


def test_a_loopback_broker_is_shown_with_a_warning_naming_the_setting(alice, settings):
    settings.PANEL_AGENT_BROKER_URL = ""
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:41234/0"

    page = signed_in(alice).get("/nodes/add/", HTTP_HOST="127.0.0.1:8000").content.decode()
    assert 'data-testid="agent-broker-url">redis://127.0.0.1:41234/0<' in page
    assert 'data-testid="agent-broker-warning"' in page
    assert "PANEL_AGENT_BROKER_URL" in page


def test_a_broker_setting_that_is_not_a_redis_url_stops_the_panel_with_a_clear_error():
    env = {"PANEL_MODE": "run", "PANEL_AGENT_BROKER_URL": "panel.example.com:6379", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='panel.settings'; "
            "from django.conf import settings; settings.INSTALLED_APPS",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "PANEL_AGENT_BROKER_URL" in result.stderr
    assert "redis://panel.example.com:6379/0" in result.stderr
