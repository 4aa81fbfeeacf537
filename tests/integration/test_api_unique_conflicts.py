"""Creates that race answer 409, never 500: a request that passed every check but lost the insert to
another request that made the same name meanwhile (parallel pipelines) is told so; any other integrity
error stays the panel's own bug (a 500 with its traceback in the log)."""

import pytest
from django.db import IntegrityError, transaction

from tests.integration.test_deployment_apply import client, npu_node, put, spec, tiny

pytestmark = pytest.mark.django_db

__all__ = ["client", "npu_node", "tiny"]  # fixtures used by name


def test_a_unique_name_hit_is_a_409_naming_the_field():
    from panel.catalog.models import Model
    from panel.core.rest.exceptions import exception_handler

    Model.objects.create(name="qwen")
    with pytest.raises(IntegrityError) as hit, transaction.atomic():
        Model.objects.create(name="qwen")
    response = exception_handler(hit.value, {})
    assert response.status_code == 409
    assert "same name" in response.data["detail"]


def test_an_integrity_error_that_is_not_unique_stays_a_server_error():
    from panel.catalog.models import Model
    from panel.core.rest.exceptions import exception_handler

    with pytest.raises(IntegrityError) as hit, transaction.atomic():
        Model.objects.create(name=None)  # NOT NULL
    assert exception_handler(hit.value, {}) is None


def test_a_create_that_loses_the_race_for_its_name_is_a_409(client, tiny, monkeypatch):
    """Another apply inserts the name between this one's "no such deployment" and its insert."""
    from panel.deployments import services
    from panel.deployments.models import Deployment

    real = services.take_plan

    def the_other_request_wins(deployment, planned):
        if deployment.pk is None and not Deployment.objects.filter(name=deployment.name).exists():
            Deployment.objects.create(name=deployment.name, model=planned.data["model"])
        return real(deployment, planned)

    monkeypatch.setattr(services, "take_plan", the_other_request_wins)
    answer = put(client, "chat", spec())
    assert answer.status_code == 409, answer.json()
    assert "chat was just created by another request" in answer.json()["detail"]


def test_a_create_whose_name_is_taken_before_it_plans_is_a_409(client, tiny, alice, monkeypatch):
    """Another pipeline's apply creates it between this one's "no such deployment" and its planning."""
    from panel.deployments.spec import apply as apply_module
    from panel.deployments.spec.spec import parse_spec

    real = apply_module.build_request

    def the_other_pipeline_first(raw_spec, model, artifact, user, current):
        if user != alice:
            apply_module.apply("chat", parse_spec(spec(), "chat"), alice)
        return real(raw_spec, model, artifact, user, current)

    monkeypatch.setattr(apply_module, "build_request", the_other_pipeline_first)
    answer = put(client, "chat", spec())
    assert answer.status_code == 409, answer.json()
    assert "chat was just created by another request" in answer.json()["detail"]
