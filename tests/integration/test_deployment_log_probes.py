"""The engine's access lines for the panel's own probes (GET /health, /metrics every few seconds) are left out
of a deployment's log by default — in the API's logs/ and in `ascend-panel logs` against a real web server
— and `?probes=true` / `--probes` bring them back; the download keeps every line."""

from datetime import UTC, datetime

import pytest

from panel.accounts.models import ApiToken
from panel.catalog.models import Model
from panel.deployments.models import Deployment, DeploymentLog
from tests.conftest import api_client_for
from tests.integration.cli_live import Cli

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

LINES = [
    "INFO:     Started server process [4242]",
    'INFO:     127.0.0.1:51234 - "GET /health HTTP/1.1" 200 OK',
    'INFO:     127.0.0.1:51236 - "GET /metrics HTTP/1.1" 200 OK',
    '(APIServer pid=4242) INFO:     127.0.0.1:51240 - "GET /health HTTP/1.1" 503 Service Unavailable',
    'INFO:     10.0.0.7:40000 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "INFO 12-04 19:00:00 [loggers.py:80] Engine 000: Avg prompt throughput: 1.0 tokens/s",
    'INFO:     127.0.0.1:51250 - "GET /health HTTP/1.1" 200 OK',
]
PROBES = {2, 3, 4, 7}  # line numbers of the probe lines above


@pytest.fixture
def deployment(db):
    model = Model.objects.create(name="probe-model")
    deployment = Deployment.objects.create(name="probed", model=model, spec={"parts": []}, log_seq=len(LINES))
    now = datetime.now(UTC)
    DeploymentLog.objects.bulk_create(
        DeploymentLog(deployment=deployment, seq=seq, time=now, node="sim-a2", line=line)
        for seq, line in enumerate(LINES, start=1)
    )
    return deployment


def seqs(response) -> list[int]:
    assert response.status_code == 200, response.content
    return [line["seq"] for line in response.json()["results"]]


def test_the_api_leaves_probe_lines_out_unless_asked(charlie, deployment):
    client = api_client_for(charlie)
    path = f"/api/v1/deployments/{deployment.pk}/logs/"
    assert seqs(client.get(path)) == [seq for seq in range(1, 8) if seq not in PROBES]
    assert seqs(client.get(path, {"probes": "true"})) == list(range(1, 8))
    assert seqs(client.get(path, {"after_seq": 4})) == [5, 6]
    download = client.get(f"/api/v1/deployments/{deployment.pk}/logs.txt").content.decode()
    assert download.count("GET /health") == 3


def test_ascend_panel_logs_hides_probe_lines_unless_probes(live_web, charlie, deployment, tmp_path):
    cli = Cli(live_web.url, tmp_path / "config")
    env = {"ASCEND_PANEL_URL": live_web.url, "ASCEND_PANEL_TOKEN": ApiToken.issue(charlie, "logs")[1]}
    plain = cli.run("logs", "probed", **env)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines() == [LINES[seq - 1] for seq in range(1, 8) if seq not in PROBES]
    every = cli.run("logs", "probed", "--probes", **env)
    assert every.stdout.splitlines() == LINES
