"""A model copy refuses an SSH user that rsync would read as an option when it is asked, naming the field,
instead of queueing an operation that the agent then fails."""

import pytest
from django.core.exceptions import ValidationError

from panel.catalog import copies
from panel.catalog.models import Model, ModelArtifact
from panel.nodes.models import Node

pytestmark = pytest.mark.django_db


@pytest.fixture
def artifact(db):
    source = Node.objects.create(name="copy-from", address="10.0.0.1")
    model = Model.objects.create(name="copy-model", source="path")
    return ModelArtifact.objects.create(model=model, node=source, path="/data/models/copy-model", ready=True)


@pytest.mark.parametrize("user", ["-oProxyCommand=touch /tmp/x", "root@evil", "a b"])
def test_a_copy_refuses_an_ssh_user_that_is_not_a_user_name(artifact, bob, user, settings):
    settings.PANEL_MODELS_ROOT = "/data/models"
    target = Node.objects.create(name="copy-to", address="10.0.0.2")
    with pytest.raises(ValidationError) as refused:
        copies.start_copy(artifact, target, bob, user)
    assert "target_user" in refused.value.message_dict
    assert not artifact.node.operations.exists()


def test_a_copy_with_a_plain_user_is_queued(artifact, bob, settings, django_capture_on_commit_callbacks):
    settings.PANEL_MODELS_ROOT = "/data/models"
    target = Node.objects.create(name="copy-to", address="10.0.0.2")
    with django_capture_on_commit_callbacks(execute=False):
        operation = copies.start_copy(artifact, target, bob, "ascend")
    assert operation.params["target_node"] == target.pk
