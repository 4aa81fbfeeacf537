"""Models through the real worker on the simulated node: register a folder → inspect → facts stored;
W8A8_DYNAMIC conversion → a new, verified artifact; delete → the folder and the record are gone."""

import pytest

from tests.integration.conftest import TEST_NODE, wait_until_ended
from workers.models.tiny import make_tiny_model

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


@pytest.fixture
def node(celery_worker, settings):
    from panel.nodes.models import Node

    settings.PANEL_MODELS_ROOT = "/data/models"
    make_tiny_model(celery_worker.sim_root / "data/models/tiny", arch="qwen2")
    return Node.objects.create(name=TEST_NODE, transport="agent")


def test_a_registered_folder_is_inspected_quantized_and_deleted_on_the_node(node, bob, celery_worker):
    from panel.catalog.copies import start_artifact_delete, start_conversion
    from panel.catalog.models import ModelArtifact
    from panel.catalog.services import register_model

    model, operation = register_model(source="local", node=node, path="/data/models/tiny", user=bob)
    assert wait_until_ended(operation).status == "succeeded", operation.error
    model.refresh_from_db()
    assert model.facts["architecture"] == "Qwen2ForCausalLM"
    assert model.facts_source == "inspect"
    original = ModelArtifact.objects.get(model=model, node=node)
    assert original.ready
    assert original.format == "hf"
    assert original.size_bytes > 0

    conversion = wait_until_ended(start_conversion(original, "w8a8_dynamic", user=bob))
    assert conversion.status == "succeeded", (conversion.error, conversion.hint)
    assert conversion.result["verification"]["relative_error_by_tensor"]
    quantized = ModelArtifact.objects.get(path="/data/models/tiny-w8a8")
    assert quantized.format == "w8a8_dynamic"
    assert quantized.made_from == original
    assert quantized.verification["passed"] is True
    assert quantized.facts["quantization"] == "W8A8_DYNAMIC"
    assert (celery_worker.sim_root / "data/models/tiny-w8a8/quant_model_description.json").is_file()

    deletion = wait_until_ended(start_artifact_delete(quantized, user=bob))
    assert deletion.status == "succeeded", deletion.error
    assert not ModelArtifact.objects.filter(pk=quantized.pk).exists()
    assert not (celery_worker.sim_root / "data/models/tiny-w8a8").exists()


def test_the_agent_reads_nothing_outside_its_models_root_even_when_the_panel_asks(node, bob, celery_worker):
    """A copy recorded at /etc (a row from before the rule, or written behind the panel's back): the
    agent's own check after realpath refuses to inspect it, and a link inside the root to /etc as well."""
    from panel.catalog.models import Model, ModelArtifact
    from panel.catalog.services import start_inspection

    (celery_worker.sim_root / "data/models/etc-link").symlink_to(celery_worker.sim_root / "etc")
    model = Model.objects.create(name="planted", source="local")
    for path in ("/etc", "/data/models/etc-link"):
        artifact = ModelArtifact.objects.create(model=model, node=node, path=path, ready=False)
        operation = wait_until_ended(start_inspection(artifact, user=bob))
        assert operation.status == "failed"
        assert "models root" in operation.error


def test_the_starter_catalog_loads_once_and_gives_planner_fits(db):
    from panel.catalog.models import Model
    from panel.catalog.planning import fit_on_typical_node
    from panel.catalog.services import load_starter_catalog

    created, _ = load_starter_catalog()
    assert created > 0
    assert load_starter_catalog() == (0, created)
    qwen = Model.objects.get(name="qwen2.5-7b-instruct")
    assert qwen.source == "modelscope"
    fit = fit_on_typical_node(qwen.facts)
    assert fit["fits"] is True
    assert fit["tp"] == 1


def test_deleting_outside_the_models_root_is_refused(node, bob):
    from django.core.exceptions import ValidationError

    from panel.catalog.copies import start_artifact_delete
    from panel.catalog.models import Model, ModelArtifact

    model = Model.objects.create(name="elsewhere", source="local")
    artifact = ModelArtifact.objects.create(model=model, node=node, path="/home/user/model", ready=True)
    with pytest.raises(ValidationError, match="outside the models root"):
        start_artifact_delete(artifact, user=bob)


def test_a_failed_download_says_what_happened_and_what_to_do_without_a_traceback(node, bob, client, settings):
    from django.urls import reverse

    from panel.catalog.models import Model
    from panel.catalog.services import start_download
    from tests.conftest import _free_port

    unreachable = f"http://127.0.0.1:{_free_port()}"
    model = Model.objects.create(name="qwen-tiny", source="modelscope", repo_id="Qwen/Qwen3-0.6B")
    settings.PANEL_MODELSCOPE_ENDPOINT = unreachable
    operation = wait_until_ended(start_download(model, node, user=bob))
    assert operation.status == "failed"
    assert operation.error.startswith("The hub could not list the model: ")
    assert unreachable in operation.error
    assert "PANEL_MODELSCOPE_ENDPOINT" in operation.hint
    lines = [e.payload.get("line", "") for e in operation.events.filter(kind="log")]
    assert not any("Traceback" in line or line.lstrip().startswith("File ") for line in lines)
    client.force_login(bob)
    page = client.get(reverse("catalog:detail", args=[model.pk])).content.decode()
    assert "The hub could not list the model" in page
    assert "PANEL_MODELSCOPE_ENDPOINT" in page

    from panel.catalog.services import start_hub_inspection

    read = wait_until_ended(start_hub_inspection(model, node, user=bob))
    assert read.status == "failed"
    assert read.error.startswith("The hub could not list the model: ")
    assert read.hint == operation.hint
    assert not any("Traceback" in e.payload.get("line", "") for e in read.events.filter(kind="log"))
