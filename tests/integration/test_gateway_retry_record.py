"""A retry away from an instance is recorded for an admin once a minute (docs/serving-plane.md §4): what the
gateway calls after a retry (panel.gateway.proxy.handler._open), here in this process, with the in-process
worker storing the decision. A separate web process publishes to the broker without this test session's
queue prefix, so it would not reach that worker; the retries themselves, on the real web server and sim
engines: tests/e2e/test_gateway_failover.py."""

import asyncio
import time

import pytest

from panel.catalog.models import Model
from panel.deployments.decision_models import Decision
from panel.gateway import store
from panel.gateway.instances import failover, pool
from tests.deployment_helpers import wait_for
from tests.gateway_helpers import fail_npu_of, replica_on_its_own_node
from tests.sim_engine_process import free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_a_retry_away_from_an_instance_is_recorded_once_a_minute_for_an_admin(
    celery_worker, fresh_gateway_state
):
    model = Model.objects.create(name="qwen-failover")
    # Rows only: the note is made from the instances the gateway picked, no engine answers here.
    qwen_a, qwen_b = (replica_on_its_own_node(model, name, free_port()) for name in ("qwen-a", "qwen-b"))
    fail_npu_of(qwen_a)
    failed = pool.Instance("qwen-a/0", qwen_a.pk, "qwen-a", "http://127.0.0.1:1/v1", "")
    served = pool.Instance("qwen-b/0", qwen_b.pk, "qwen-b", "http://127.0.0.1:2/v1", "")

    async def twice():
        redis = store.aclient()
        await failover.note_retry(redis, [failed], served)
        await failover.note_retry(redis, [failed], served)  # within the minute: not recorded again

    asyncio.run(twice())
    retried = wait_for(
        lambda: list(Decision.objects.filter(kind="request_retried")), 30, "the retry recorded"
    )
    time.sleep(2)  # a second record, if one were sent, would be in by now
    assert Decision.objects.filter(kind="request_retried").count() == 1
    assert (retried[0].deployment_name, retried[0].actor, retried[0].outcome) == ("qwen-a", "gateway", "done")
    assert retried[0].reason == (
        "The gateway sent requests that qwen-a/0 failed before their first byte to qwen-b/0. "
        "Its NPU 0 failed."
    )
