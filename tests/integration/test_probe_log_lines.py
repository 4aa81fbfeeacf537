"""A deployment's log lines come in probe answers, each read from the offset the panel held when it asked.
Probes queued while an agent was away are answered together, all from one offset; CI once stored an
adopted container's line twice that way."""

import pytest
from django.utils import timezone

from panel.catalog.models import Model
from panel.deployments.models import Deployment
from panel.deployments.rollouts.reconcile import ingest_probe
from panel.nodes.models import Node

pytestmark = pytest.mark.django_db


@pytest.fixture
def deployment():
    node = Node.objects.create(name="node-a")
    deployment = Deployment.objects.create(name="logged", model=Model.objects.create(name="m"))
    deployment.nodes.add(node)
    return deployment


def answer(**result) -> dict:
    return {"node": "node-a", "time": timezone.now().isoformat(), "results": [{"name": "logged", **result}]}


def stored(deployment) -> list[str]:
    return list(deployment.log_lines.order_by("seq").values_list("line", flat=True))


def held_offset(deployment) -> int:
    deployment.refresh_from_db()
    return deployment.runtime["nodes"]["node-a"]["log_offset"]


def test_two_answers_read_from_the_same_offset_store_their_lines_once(deployment):
    ingest_probe(answer(log_from=0, log_offset=40, lines=["starting", "Application startup complete."]))
    ingest_probe(answer(log_from=0, log_offset=40, lines=["starting", "Application startup complete."]))

    assert stored(deployment) == ["starting", "Application startup complete."]
    assert held_offset(deployment) == 40


def test_a_late_answer_from_an_older_offset_neither_stores_nor_moves_the_offset_back(deployment):
    ingest_probe(answer(log_from=0, log_offset=10, lines=["one"]))
    ingest_probe(answer(log_from=10, log_offset=20, lines=["two"]))
    ingest_probe(answer(log_from=0, log_offset=10, lines=["one"]))  # asked before the second, answered after
    ingest_probe(answer(log_from=20, log_offset=30, lines=["three"]))

    assert stored(deployment) == ["one", "two", "three"]
    assert held_offset(deployment) == 30


def test_an_answer_that_does_not_say_where_it_read_from_is_stored(deployment):
    ingest_probe(answer(log_offset=10, lines=["from an older agent"]))

    assert stored(deployment) == ["from an older agent"]
    assert held_offset(deployment) == 10
