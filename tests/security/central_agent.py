"""The central agent as the fleet setup runs it, for the security tier: its credential written by
`manage.py agent_credential --central --broker` (its key and its own broker user's URL), and a real
`python -m workers.agent --central` process holding those two and nothing of the panel's (no key material,
no Redis, no database)."""

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

from django.core.management import call_command

from tests.conftest import REPO
from workers.sealing import PANEL_KEY_MATERIAL_VARS


class CentralCredential(NamedTuple):
    key: bytes
    broker_url: str
    folder: Path


def central_credential(folder: Path) -> CentralCredential:
    """What the panel hands the central agent (and what an attacker on its host would hold)."""
    call_command("agent_credential", "--central", "--broker", "--dir", str(folder), stdout=io.StringIO())
    return CentralCredential(
        (folder / "central.key").read_bytes(), (folder / "central.broker").read_text().strip(), folder
    )


@contextlib.contextmanager
def central_agent_process(credential: CentralCredential, state_dir: Path):
    """A running central agent; yields its log's path. Its environment keeps nothing of the test process's
    Celery, Redis, Django or the panel's key material."""
    dropped = ("REDIS", "CELERY", "DJANGO", "PYTEST", "DATABASE", *PANEL_KEY_MATERIAL_VARS)
    env = {
        **{name: value for name, value in os.environ.items() if not name.startswith(dropped)},
        "CELERY_BROKER_URL": credential.broker_url,
        "ASCEND_PANEL_AGENT_KEY_FILE": str(credential.folder / "central.key"),
        "ASCEND_PANEL_STATE_DIR": str(state_dir),
        "REDIS_URL": "redis://127.0.0.1:9/0",  # nothing listens: touching Redis would fail
        "PYTHONPATH": str(REPO),
    }
    if (ca_file := credential.folder / "broker-ca.pem").exists():  # as docker-compose's central agent pins it
        env["ASCEND_PANEL_BROKER_CA_FILE"] = str(ca_file)
    log_path = state_dir.parent / "central-agent.log"
    with log_path.open("wb") as log:
        agent = subprocess.Popen(
            [sys.executable, "-m", "workers.agent", "--central"],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield log_path
    finally:
        agent.terminate()
        agent.wait(30)
