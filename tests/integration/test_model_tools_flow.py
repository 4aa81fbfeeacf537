"""ATC and msModelSlim through the real worker on the simulated A2 node: the agent sources the toolkit's
set_env.sh and runs the sim's atc on an ONNX model written here, or the msModelSlim stand-in on a tiny
Hugging Face model; the log streams into the operation and failures come back explained."""

import datetime

import pytest

from tests.integration.conftest import TEST_NODE, wait_until_ended
from tests.provisioning_helpers import wait_finished
from workers.models.onnx_file import write_tiny_vision_model
from workers.models.tiny import make_tiny_model
from workers.sim.atc import OM_MAGIC
from workers.sim.tree import install_msmodelslim

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


@pytest.fixture
def node(celery_worker, settings):
    from panel.nodes.models import Node

    settings.PANEL_MODELS_ROOT = "/data/models"
    return Node.objects.create(name=TEST_NODE, transport="agent")


@pytest.fixture
def onnx_artifact(node, bob, celery_worker):
    from panel.catalog.models import ModelArtifact
    from panel.catalog.services import register_model

    write_tiny_vision_model(celery_worker.sim_root / "data/models/vision/model.onnx")
    model, operation = register_model(source="local", node=node, path="/data/models/vision", user=bob)
    assert wait_until_ended(operation).status == "succeeded", operation.error
    artifact = ModelArtifact.objects.get(model=model, node=node)
    assert artifact.format == "onnx"
    return artifact


def log_lines(operation) -> list[tuple[datetime.datetime, str]]:
    # The agent's order: its event batches leave from several threads, and `seq` is the order of arrival
    # (panel.operations.ordering); under load the closing line arrived before the one printed ahead of it.
    # So the tests read a log once wait_finished says every event is stored, not at the terminal status.
    events = operation.events.filter(kind="log").order_by("attempt", "agent_seq")
    return [(event.time, event.payload["line"]) for event in events]


def started_from_the_models_page(client, user, url_name, artifact, form):
    """Post the artifact's form as the Models page does; the operation it started."""
    from django.urls import reverse

    from panel.operations.models import Operation

    client.force_login(user)
    response = client.post(reverse(url_name, args=[artifact.pk]), form)
    assert response.status_code in (200, 302), response.content[:500]
    return Operation.objects.latest("created")


def test_atc_converts_the_onnx_model_with_its_log_streamed(onnx_artifact, bob, celery_worker, client):
    from panel.catalog.models import ModelArtifact

    form = {"input_shape": "images:1,3,8,8", "input_format": "NCHW", "soc_version": "Ascend910B3", "path": ""}
    operation = wait_finished(
        started_from_the_models_page(client, bob, "catalog:artifact-atc", onnx_artifact, form)
    )
    assert operation.status == "succeeded", (operation.error, operation.hint)
    om = ModelArtifact.objects.get(made_from=onnx_artifact)
    assert om.format == "om"
    om_file = celery_worker.sim_root / om.path.lstrip("/") / "model.om"
    assert om_file.read_bytes().startswith(OM_MAGIC)

    lines = log_lines(operation)
    texts = [line for _, line in lines]
    # The log shows the atc command itself, shell-quoted, not the bash that sources set_env.sh first.
    staging = celery_worker.sim_root / om.path.lstrip("/")
    assert texts[0] == (
        f"$ atc --model={celery_worker.sim_root}/data/models/vision/model.onnx --framework=5 "
        f"--output={staging}.tmp/model --soc_version=Ascend910B3 --input_format=NCHW "
        "--input_shape=images:1,3,8,8 --log=error"
    )
    steps = [(time, text) for time, text in lines if "ATC(sim)" in text]
    assert any("compile operator 3/3: GlobalAveragePool" in text for _, text in steps)
    assert texts[-1] == "ATC run success, welcome to the next use."
    # Each line is logged when atc prints it: the sim pauses between steps, so the first and the last
    # step reach the log at least those pauses apart (a log captured at exit would carry one instant).
    assert steps[-1][0] - steps[0][0] >= datetime.timedelta(seconds=1)


@pytest.mark.parametrize(
    ("kwargs", "title", "quoted"),
    [
        (
            {"input_shape": "input:1,3,8,8", "soc_version": "Ascend910B3"},
            "--input_shape does not fit the model's inputs",
            "E10016: Opname [input] specified in [--input_shape] is not found in the model",
        ),
        (
            {"input_shape": "images:1,3,224,224", "soc_version": "Ascend910B3"},
            "--input_shape does not fit the model's inputs",
            "the shape of input [images] is static in the model, [1,3,8,8]",
        ),
        (
            {"input_shape": "images:1,3,8,8", "soc_version": "Ascend310P3"},
            "ATC cannot build for this SoC version",
            "no operator package for 310p (installed: 910b)",
        ),
    ],
)
def test_a_failed_atc_run_is_explained(onnx_artifact, bob, celery_worker, kwargs, title, quoted):
    from panel.catalog.copies import start_atc
    from panel.catalog.models import ModelArtifact

    operation = wait_finished(start_atc(onnx_artifact, bob, **kwargs))
    assert operation.status == "failed"
    assert operation.error == "atc did not produce model.om; see the log"
    assert operation.hint.startswith(title + ": ")
    assert any(quoted in line for _, line in log_lines(operation))
    assert not ModelArtifact.objects.filter(made_from=onnx_artifact).exists()
    leftovers = sorted(p.name for p in (celery_worker.sim_root / "data/models").iterdir())
    assert leftovers == ["vision"]


def test_an_onnx_model_shows_its_graph_not_llm_facts(onnx_artifact, bob, client):
    from django.urls import reverse

    assert onnx_artifact.facts["opset"] == 13
    assert onnx_artifact.facts["inputs"] == [{"name": "images", "dims": [1, 3, 8, 8]}]
    client.force_login(bob)
    page = client.get(reverse("catalog:detail", args=[onnx_artifact.model.pk])).content.decode()
    assert 'data-testid="onnx-facts"' in page
    assert "images: [1, 3, 8, 8]" in page
    assert 'data-fact="opset">13<' in page
    for llm_fact in ("Weights", "Tokenizer", "Chat template", "KV heads"):
        assert f"<th>{llm_fact}</th>" not in page


def test_atc_into_an_existing_folder_is_refused_with_a_free_one_named(onnx_artifact, bob, celery_worker):
    from django.core.exceptions import ValidationError

    from panel.catalog.copies import start_atc

    first = wait_until_ended(
        start_atc(onnx_artifact, bob, input_shape="images:1,3,8,8", soc_version="Ascend910B3")
    )
    assert first.status == "succeeded", (first.error, first.hint)
    path = first.params["path"]
    with pytest.raises(ValidationError) as refused:
        start_atc(onnx_artifact, bob, input_shape="images:1,3,8,8", soc_version="Ascend910B3")
    message = refused.value.message_dict["path"][0]
    assert f"already has a model at {path}" in message
    assert f"Choose another output folder, e.g. {path}-2" in message
    again = wait_until_ended(start_atc(onnx_artifact, bob, soc_version="Ascend910B3", path=f"{path}-2"))
    assert again.status == "succeeded", (again.error, again.hint)


@pytest.fixture
def hf_artifact(node, bob, celery_worker):
    from panel.catalog.models import ModelArtifact
    from panel.catalog.services import register_model

    make_tiny_model(celery_worker.sim_root / "data/models/tiny", arch="qwen2")
    model, operation = register_model(source="local", node=node, path="/data/models/tiny", user=bob)
    assert wait_until_ended(operation).status == "succeeded", operation.error
    return ModelArtifact.objects.get(model=model, node=node)


def test_msmodelslim_quantizes_on_a_node_that_has_it(hf_artifact, bob, celery_worker, client):
    from panel.catalog.models import ModelArtifact

    install_msmodelslim(celery_worker.sim_root)
    form = {"target": "w8a8_dynamic", "backend": "msmodelslim", "device": "npu", "model_type": "Qwen2-0.5B"}
    operation = wait_finished(
        started_from_the_models_page(client, bob, "catalog:artifact-convert", hf_artifact, form)
    )
    assert operation.status == "succeeded", (operation.error, operation.hint)
    quantized = ModelArtifact.objects.get(made_from=hf_artifact)
    assert quantized.facts["quantization"].startswith("W8A8")
    folder = celery_worker.sim_root / quantized.path.lstrip("/")
    assert (folder / "quant_model_description.json").is_file()
    texts = [line for _, line in log_lines(operation)]
    source = celery_worker.sim_root / "data/models/tiny"
    assert texts[0].split() == [
        "$", "msmodelslim", "quant", "--model_type", "Qwen2-0.5B", "--model_path", str(source),
        "--save_path", f"{folder}.tmp", "--device", "npu", "--quant_type", "w8a8",
    ]  # fmt: skip
    assert any("msmodelslim-logger - INFO - quantizing" in text for text in texts)


def test_msmodelslim_missing_on_the_node_is_explained(hf_artifact, bob):
    from panel.catalog.copies import start_conversion

    operation = wait_until_ended(start_conversion(hf_artifact, "w8a8_dynamic", bob, backend="msmodelslim"))
    assert operation.status == "failed"
    assert operation.error == "msmodelslim is not installed on this node"
    assert "use the built-in quantizer" in operation.hint
