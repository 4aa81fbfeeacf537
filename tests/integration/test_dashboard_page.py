"""The dashboard's first paint, rendered by the server from the last inventory before any live frame."""

from datetime import timedelta

import pytest
from django.utils import timezone

pytestmark = pytest.mark.django_db


def make_node(name, *, seconds_since_heartbeat, healths):
    from panel.nodes.models import Node, Npu

    node = Node.objects.create(
        name=name,
        transport="agent",
        status="online",
        heartbeat_interval=5,
        last_heartbeat=timezone.now() - timedelta(seconds=seconds_since_heartbeat),
    )
    for npu_id, health in enumerate(healths):
        Npu.objects.create(node=node, npu_id=npu_id, name="910B3", health=health, hbm_total_mb=65536)
    return node


def cards_of(html, node):
    section = html.split(f'data-node="{node}" data-node-id=')[1].split("</section>")[0]
    return section.count('data-testid="npu-card"'), section


def test_it_renders_every_inventoried_npu_with_its_health_colour(client, charlie):
    make_node("rack-a", seconds_since_heartbeat=1, healths=["OK", "Alarm", "Warning", "OK"])
    client.force_login(charlie)

    html = client.get("/").content.decode()

    count, section = cards_of(html, "rack-a")
    assert count == 4
    assert 'class="npu-card status-alarm" data-npu="1"' in section
    assert 'class="npu-card status-warning" data-npu="2"' in section
    assert section.count('class="npu-card status-ok"') == 2
    assert 'data-memory-total="262144"' in html  # 4 × 64 GB, the fleet row's HBM total before any frame


def test_it_greys_the_npus_of_a_node_whose_agent_went_silent(client, charlie):
    make_node("rack-b", seconds_since_heartbeat=600, healths=["OK", "Alarm"])
    client.force_login(charlie)

    html = client.get("/").content.decode()

    _count, section = cards_of(html, "rack-b")
    assert section.count('class="npu-card status-offline"') == 2
    assert 'data-status="offline"' in html


def test_it_names_the_deployment_holding_an_npu(client, charlie):
    from panel.catalog.models import Model
    from panel.deployments.models import Deployment

    node = make_node("rack-c", seconds_since_heartbeat=1, healths=["OK", "OK"])
    deployment = Deployment.objects.create(name="qwen3-8b", model=Model.objects.create(name="Qwen3-8B"))
    deployment.npus.add(node.npus.get(npu_id=1))
    client.force_login(charlie)

    _count, section = cards_of(client.get("/").content.decode(), "rack-c")

    assert 'title="Deployment on this NPU">qwen3-8b</div>' in section
    assert section.count('title="Deployment on this NPU"></div>') == 1  # NPU 0 is free


def test_anonymous_visitors_are_sent_to_log_in(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
