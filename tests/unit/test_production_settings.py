"""Outside `make run` and the tests the panel refuses to start without SECRET_KEY, saying how to make one,
and runs with DEBUG off and HTTPS-only cookies. Real interpreters importing the real settings module."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Reading a setting imports panel.settings, where every refusal below is made; django.setup() would load every
# app on top of it (2 s a probe on a loaded machine, 30 s for this module) and check nothing more.
PROBE = "from django.conf import settings; print(settings.DEBUG)"
COOKIES_PROBE = (
    "from django.conf import settings; print(settings.SESSION_COOKIE_SECURE, settings.CSRF_COOKIE_SECURE)"
)
DOT_ENV = (REPO / ".env").read_text() if (REPO / ".env").exists() else ""


def _start(probe=PROBE, **env):
    # A clean environment: nothing of the test run (PANEL_MODE, SECRET_KEY, DEBUG) leaks in.
    clean = {
        "PATH": os.environ["PATH"],
        "DJANGO_SETTINGS_MODULE": "panel.settings",
        "PYTHONPATH": str(REPO),
        "REDIS_URL": "redis://:a-long-random-broker-password@127.0.0.1:6379/0",
    }
    return subprocess.run(
        [sys.executable, "-c", probe],
        env={**clean, **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.skipif(
    "SECRET_KEY" in DOT_ENV, reason="this checkout's .env sets SECRET_KEY, and settings read it"
)
def test_production_without_secret_key_exits_with_the_fix():
    done = _start(PANEL_MODE="production")
    assert done.returncode != 0
    assert "SECRET_KEY is not set" in done.stderr
    assert "secrets.token_urlsafe" in done.stderr


def test_production_with_a_secret_key_runs_with_debug_off():
    done = _start(PANEL_MODE="production", SECRET_KEY="x" * 50)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_secret_key_may_come_from_a_file(tmp_path):
    secret = tmp_path / "secret_key"
    secret.write_text("y" * 50 + "\n")
    done = _start(PANEL_MODE="production", SECRET_KEY_FILE=str(secret))
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif("COOKIE_SECURE" in DOT_ENV, reason="this checkout's .env sets the cookie flags")
@pytest.mark.parametrize(
    ("mode", "expected"), [("production", "True True"), ("run", "False False"), ("test", "False False")]
)
def test_cookies_are_https_only_by_default_in_production_only(mode, expected):
    done = _start(COOKIES_PROBE, PANEL_MODE=mode, SECRET_KEY="x" * 50)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"SESSION_COOKIE_SECURE": "false"}, "False False"),  # a plain-HTTP lab: the CSRF cookie follows
        ({"SESSION_COOKIE_SECURE": "false", "CSRF_COOKIE_SECURE": "true"}, "False True"),
        ({"CSRF_COOKIE_SECURE": "false"}, "True False"),
    ],
)
def test_production_cookie_flags_may_be_overridden(flags, expected):
    done = _start(COOKIES_PROBE, PANEL_MODE="production", SECRET_KEY="x" * 50, **flags)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected


@pytest.mark.parametrize("url", ["redis://127.0.0.1:6379/0", "redis://:change-me@redis:6379/0"])
def test_production_refuses_a_broker_without_a_real_password(url):
    done = _start(PANEL_MODE="production", SECRET_KEY="x" * 50, REDIS_URL=url)
    assert done.returncode != 0
    assert "REDIS_URL has no Redis password, or a well-known one" in done.stderr


def test_make_run_and_tests_may_use_a_local_redis_without_a_password():
    done = _start(PANEL_MODE="run", REDIS_URL="redis://127.0.0.1:6379/0")
    assert done.returncode == 0, done.stderr
