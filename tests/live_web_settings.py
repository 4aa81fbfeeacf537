"""Settings of the web server tests/live_web.py starts: panel.settings on the test session's
channel-layer and Celery key prefixes, as tests/conftest.py's `_wired_to_redis` sets them in the test
process, so the server and the in-process Celery worker hear each other's messages."""

import os

from panel.settings import *  # noqa: F403
from panel.settings import CHANNEL_LAYERS
from workers.celery_app import app

_PREFIX = os.environ["PANEL_TEST_PREFIX"]
CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = f"asgi-{_PREFIX}"
app.conf.broker_transport_options = {"global_keyprefix": f"{_PREFIX}:"}
