"""Pages and list endpoints at fleet size: one page of nodes at a time, filters that the page links keep,
the same number of queries for 10 nodes as for 120, and websocket subscriptions checked in one query per
kind of object however many nodes a page shows."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from panel.catalog.models import Model
from panel.deployments.models import Deployment
from panel.monitoring.models import Alert, AlertKind, AlertSeverity
from panel.nodes.models import Node, Npu
from panel.realtime.groups import joinable
from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db
PAGE = 50


def make_fleet(start: int, count: int) -> list[Node]:
    """Nodes of 8 NPUs each: every 7th silent (offline now), every 5th with an open alert, every 2nd
    serving a deployment on 4 of its NPUs."""
    now = timezone.now()
    model, _ = Model.objects.get_or_create(name="scale-model")
    nodes = Node.objects.bulk_create(
        [
            Node(
                name=f"scale-{i:04}",
                transport="agent",
                status="online",
                heartbeat_interval=5,
                last_heartbeat=now - timedelta(seconds=600 if i % 7 == 0 else 1),
            )
            for i in range(start, start + count)
        ]
    )
    Npu.objects.bulk_create(
        [
            Npu(node=node, npu_id=n, logic_id=n, name="910B3", health="OK", hbm_total_mb=65536)
            for node in nodes
            for n in range(8)
        ]
    )
    for i, node in zip(range(start, start + count), nodes, strict=True):
        if i % 5 == 0:
            Alert.objects.create(
                node=node,
                key="npu_temperature:1:0",
                kind=AlertKind.NPU_TEMPERATURE,
                severity=AlertSeverity.WARNING,
                npu_id=1,
                chip_id=0,
                message="hot",
                first_seen=now,
                last_seen=now,
            )
        if i % 2 == 0:
            deployment = Deployment.objects.create(name=f"serve-{i:04}", model=model)
            deployment.nodes.add(node)
            deployment.npus.set(node.npus.filter(npu_id__lt=4))
    return nodes


def queries_for(client, url) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
    return len(captured)


def names_on(html: str, attribute: str = "data-node") -> list[str]:
    return re.findall(rf'<tr {attribute}="([^"]+)"', html)


@pytest.mark.parametrize("url", ["/", "/nodes/", "/deployments/", "/alerts/"])
def test_pages_make_the_same_queries_for_10_nodes_and_120(client, charlie, url):
    client.force_login(charlie)
    make_fleet(0, 10)
    queries_for(client, url)  # warm: the session and the user's role
    few = queries_for(client, url)
    make_fleet(10, 110)
    assert queries_for(client, url) == few


@pytest.mark.parametrize("url", ["/api/v1/nodes/", "/api/v1/deployments/", "/api/v1/alerts/"])
def test_list_endpoints_make_the_same_queries_for_10_nodes_and_120(charlie, url):
    client = api_client_for(charlie)
    make_fleet(0, 10)
    queries_for(client, url)
    few = queries_for(client, url)
    make_fleet(10, 110)
    assert queries_for(client, url) == few


def test_the_nodes_list_shows_one_page_and_its_links_keep_the_filter(client, charlie):
    make_fleet(0, 120)
    client.force_login(charlie)

    first = client.get("/nodes/").content.decode()
    assert re.findall(r'<a href="/nodes/(scale-\d+)/">', first) == [f"scale-{i:04}" for i in range(PAGE)]
    assert 'href="?page=2" rel="next"' in first
    assert "1–50 of 120" in first

    filtered = client.get("/nodes/?name=scale-00&page=2").content.decode()
    shown = re.findall(r'<a href="/nodes/(scale-\d+)/">', filtered)
    assert shown == [f"scale-{i:04}" for i in range(50, 100)]  # scale-0000 … scale-0099 match, 2 pages
    assert 'href="?name=scale-00&amp;page=1" rel="prev"' in filtered
    assert 'value="scale-00"' in filtered  # the search box still holds the filter

    offline = client.get("/nodes/?status=offline").content.decode()
    assert re.findall(r'<a href="/nodes/(scale-\d+)/">', offline) == [
        f"scale-{i:04}" for i in range(0, 120, 7)
    ]


def test_the_dashboard_shows_one_page_of_nodes_and_counts_the_whole_fleet(client, charlie):
    make_fleet(0, 120)
    client.force_login(charlie)

    html = client.get("/?page=3").content.decode()
    assert names_on(html) == [f"scale-{i:04}" for i in range(100, 120)]
    assert html.count('class="node-section ') == 20
    # The figures at the top count all 120 nodes, not the 20 on this page.
    assert '<span data-f="nodes">120</span>' in html
    assert '<span data-f="npus">960</span>' in html
    assert '<div class="stat-value" data-f="alerts">24</div>' in html
    assert 'data-node="scale-0100" data-memory-total="524288" data-alert-ids="' in html
    row = re.search(r'<tr data-node="scale-0105"[^>]*data-alert-ids="(\d+)"', html)
    assert row, "scale-0105 has an open alert: its row carries its id for the live count"


def test_the_dashboard_filter_needs_attention_finds_them_on_every_page(client, charlie):
    make_fleet(0, 120)
    # An NPU the last inventory found in Alarm: every 3rd node's.
    Npu.objects.filter(node__name__in=[f"scale-{i:04}" for i in range(0, 120, 3)], npu_id=3).update(
        health="Alarm"
    )
    client.force_login(charlie)

    html = client.get("/?attention=true").content.decode()
    expected = [f"scale-{i:04}" for i in range(120) if i % 7 == 0 or i % 5 == 0 or i % 3 == 0]
    assert len(expected) > PAGE
    assert names_on(html) == expected[:PAGE]
    page_two = client.get("/?attention=true&page=2").content.decode()
    assert names_on(page_two) == expected[PAGE:]
    assert 'name="attention" value="true" data-f="problems" checked' in html


def test_the_deployments_list_links_keep_the_search(client, charlie):
    make_fleet(0, 120)
    client.force_login(charlie)
    html = client.get("/deployments/?search=serve-0&page=2").content.decode()
    assert names_on(html, "data-deployment") == [f"serve-{i:04}" for i in range(100, 120, 2)]
    assert 'href="?search=serve-0&amp;page=1" rel="prev"' in html


def test_the_nodes_api_pages_and_filters_by_status_now_and_attention(charlie):
    make_fleet(0, 120)
    client = api_client_for(charlie)
    second = client.get("/api/v1/nodes/?page=2").json()
    assert second["count"] == 120
    assert [node["name"] for node in second["results"]] == [f"scale-{i:04}" for i in range(50, 100)]
    offline = client.get("/api/v1/nodes/?status=offline&page_size=100").json()
    assert [node["name"] for node in offline["results"]] == [f"scale-{i:04}" for i in range(0, 120, 7)]
    assert {node["status"] for node in offline["results"]} == {"offline"}
    calm = client.get("/api/v1/nodes/?attention=false&page_size=1000").json()
    assert calm["count"] == len([i for i in range(120) if i % 7 and i % 5])
    assert client.get("/api/v1/nodes/?status=sleeping").status_code == 400


def test_the_alerts_api_answers_for_several_nodes_at_once(charlie):
    make_fleet(0, 20)
    client = api_client_for(charlie)
    answer = client.get("/api/v1/alerts/?open=true&nodes=scale-0000,scale-0005,scale-0006").json()
    assert sorted(alert["node"] for alert in answer["results"]) == ["scale-0000", "scale-0005"]


def test_a_page_of_node_groups_is_checked_in_one_query_per_kind(charlie):
    make_fleet(0, 60)
    page = [f"node.scale-{i:04}" for i in range(PAGE)]
    joinable(charlie, ["fleet"])  # warm: the user's role

    with CaptureQueriesContext(connection) as one:
        assert joinable(charlie, ["fleet", "node.scale-0000"]) == {"fleet", "node.scale-0000"}
    with CaptureQueriesContext(connection) as fifty:
        allowed = joinable(charlie, ["fleet", "alerts", *page, "node.gone", "deployment.serve-0002", "x.y"])
    assert allowed == {"fleet", "alerts", *page, "deployment.serve-0002"}
    assert len(fifty) == len(one) + 1  # one more query for the deployment, none more for 49 more nodes
