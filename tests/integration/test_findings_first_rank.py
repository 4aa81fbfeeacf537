"""A failed multi-rank start's findings name the rank that failed first, on the deployment page and in the
API, as diagnose found it in the log the agent sent."""

from pathlib import Path

import pytest
from django.test import Client

from panel.catalog.models import Model
from panel.core.domain.choices import DeploymentState
from panel.deployments.models import Deployment
from tests.conftest import api_client_for
from workers.ascend.diagnose import diagnose

pytestmark = pytest.mark.django_db
LOG = Path(__file__).resolve().parents[1] / "unit" / "data" / "diagnose" / "peer_rank_died.log"


@pytest.fixture
def failed():
    model = Model.objects.create(name="tiny-ds", source="path")
    return Deployment.objects.create(
        name="ds-ranks",
        model=model,
        spec={"port": 8000, "served_model_name": "ds-ranks", "parts": []},
        observed_state=DeploymentState.FAILED,
        reason="the engine exited during start-up",
        runtime={"findings": diagnose(LOG.read_text()), "log_tail": LOG.read_text().splitlines()},
    )


def test_the_page_names_the_first_failing_rank_and_its_line(failed, charlie):
    client = Client()
    client.force_login(charlie)
    page = client.get("/deployments/ds-ranks/").content.decode()
    assert "A collective timed out: another rank failed first" in page
    assert 'First rank that failed:</strong> <span class="mono">rank 2</span>' in page
    assert "(log line 5)" in page

    client.cookies["django_language"] = "zh-hans"
    page = client.get("/deployments/ds-ranks/").content.decode()
    assert "最先出错的 rank" in page
    assert "日志第 5 行" in page
    assert "集合通信超时：另一个 rank 先出现故障" in page


def test_the_api_carries_the_general_code_and_the_first_rank(failed, charlie):
    findings = api_client_for(charlie).get(f"/api/v1/deployments/{failed.pk}/").json()["findings"]["findings"]
    (finding,) = findings
    assert (finding["code"], finding["general"]) == ("peer_rank_died", "hccl")
    assert finding["first_rank"]["rank"] == 2
    assert finding["first_rank"]["line_no"] == 5
