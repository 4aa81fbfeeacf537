"""A deployment's `routing:` (least_outstanding | prefix | session): set by the spec, the Edit page or the
wizard, refused when unknown, shown by the API, the spec export and the deployment page (with the engines'
prefix cache hit rate, in both languages); a change of routing alone restarts nothing (docs/serving-plane.md
§4), and the gateway's pool carries the primary's policy to its replicas."""

import pytest

from panel.deployments.models import Deployment
from tests.conftest import api_client_for
from tests.integration.test_deployment_apply import (  # noqa: F401  fixtures, used by name
    finish,
    npu_node,
    pending,
    put,
    running,
    spec,
    tiny,
)
from tests.integration.test_wizard_runtime import docker_node, qwen  # noqa: F401  fixtures, used by name

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(bob):
    return api_client_for(bob)


def test_apply_sets_routing_the_api_and_the_export_show_it_and_an_unknown_one_is_refused(client, tiny):  # noqa: F811
    refused = put(client, "ci-qwen", spec(routing="round_robin"))
    assert refused.status_code == 400
    assert "routing" in refused.json()["errors"]

    created = put(client, "ci-qwen", spec(routing="prefix"))
    assert created.status_code == 201, created.json()
    assert created.json()["deployment"]["routing"] == "prefix"
    running("ci-qwen")
    exported = client.get("/api/v1/deployments/ci-qwen/?format=spec").json()
    assert exported["routing"] == "prefix"
    again = put(client, "ci-qwen", exported)
    assert (again.status_code, again.json()["result"]) == (200, "unchanged")


def test_a_spec_without_routing_is_least_outstanding_and_exports_none(client, tiny):  # noqa: F811
    put(client, "ci-qwen", spec())
    running("ci-qwen")
    assert client.get("/api/v1/deployments/ci-qwen/").json()["routing"] == "least_outstanding"
    assert "routing" not in client.get("/api/v1/deployments/ci-qwen/?format=spec").json()


def test_changing_routing_alone_restarts_nothing_and_the_gateway_pool_follows(client, tiny):  # noqa: F811
    from panel.gateway.instances.pool import pool_for

    put(client, "ci-qwen", spec(replicas=2))
    for port, launch in enumerate(pending("deploy"), start=8000):  # both replicas run
        finish(launch, result={"runtime": {"pid": port, "port": port, "log_path": "/x.log"}})
    dry = put(client, "ci-qwen", spec(replicas=2, routing="session"), dry_run="true")
    assert (dry.status_code, dry.json()["effect"]) == (202, "none")
    assert dry.json()["changes"] == [{"field": "routing", "from": "least_outstanding", "to": "session"}]
    assert dry.json()["spec"]["routing"] == "session"
    assert Deployment.objects.get(name="ci-qwen").routing == "least_outstanding"

    changed = put(client, "ci-qwen", spec(replicas=2, routing="session"))
    assert changed.status_code == 202, changed.json()
    assert (changed.json()["result"], changed.json()["effect"]) == ("changed", "none")
    assert (pending("deploy"), pending("stop")) == ([], [])
    pool = pool_for("ci-qwen")
    assert pool.routing == "session"
    assert len(pool.instances) == 2  # the replica is routed by its primary's policy
    history = client.get("/api/v1/deployments/ci-qwen/revisions/").json()
    newest = history["results"][0] if isinstance(history, dict) else history[0]
    assert newest["spec"]["routing"] == "session"


def test_the_edit_page_changes_routing_and_the_page_shows_it_with_the_engines_hit_rate(bob, client, tiny):  # noqa: F811
    from tests.integration.test_deployment_edit_pages import edit_fields, page_client

    put(client, "ci-qwen", spec(state="stopped"))
    browser = page_client(bob)
    form = browser.get("/deployments/ci-qwen/edit/").content.decode()
    assert '<option value="least_outstanding" selected>' in form
    preview = browser.post(
        "/deployments/ci-qwen/edit/", edit_fields("ci-qwen", routing="prefix", preview="1")
    )
    assert 'data-change="routing"' in preview.content.decode()
    applied = browser.post(
        "/deployments/ci-qwen/edit/", edit_fields("ci-qwen", routing="prefix", confirm="1")
    )
    assert applied.status_code == 302
    assert Deployment.objects.get(name="ci-qwen").routing == "prefix"

    # The engines' own counters as the probe stored them: the page sums hits and queries.
    Deployment.objects.filter(name="ci-qwen").update(
        metrics={"prefix_cache_queries": 1000.0, "prefix_cache_hits": 625.0, "prefix_cache_hit_rate": 0.625}
    )
    page = browser.get("/deployments/ci-qwen/").content.decode()
    assert 'data-policy="prefix"' in page
    assert "Prompt prefix (cache-aware)" in page
    assert "prefix cache hit rate 62.5%" in page
    zh = browser.get("/deployments/ci-qwen/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "提示词前缀（感知缓存）" in zh
    assert "前缀缓存命中率 62.5%" in zh


def test_the_wizard_takes_routing_on_its_engine_step_and_the_deployment_is_routed_so(bob, qwen):  # noqa: F811
    from tests.wizard_steps import client_for, engine_fields, walk_to_engine_step

    browser = client_for(bob)
    walk_to_engine_step(browser, qwen)
    zh = browser.get("/deployments/new/engine/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert '<select name="routing"' in zh
    assert "会话亲和" in zh
    assert browser.post("/deployments/new/engine/", engine_fields(routing="session")).status_code == 302
    assert browser.post("/deployments/new/review/").status_code == 302
    created = Deployment.objects.get(name="qwen-small")
    assert created.routing == "session"
    assert created.revisions.get().spec["routing"] == "session"  # revision 1: a rollback keeps it
