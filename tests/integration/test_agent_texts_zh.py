"""Texts agents send in English (preflight checklists, stages, errors, hints, deployment reasons) show in
简体中文 for a viewer who chose it, numbers and names filled in after translation; the API keeps English
(a deployment's `reason_display` aside, which the page uses for live updates)."""

import pytest
from django.test import Client
from django.utils import translation

from panel.catalog.models import Model
from panel.core.domain.choices import DeploymentState, OperationKind
from panel.deployments.models import Deployment
from panel.nodes.models import Node
from panel.provisioning.models import NodeStack
from tests.conftest import api_client_for
from workers.steps.preflight import PASS, WARN, item

pytestmark = pytest.mark.django_db


def client_in(language: str, user) -> Client:
    client = Client()
    client.force_login(user)
    client.cookies["django_language"] = language
    return client


@pytest.fixture
def node_with_checklist():
    node = Node.objects.create(name="zh-node")
    unmeasured = item(
        "disk", WARN, "{location}: free space not measured", "Check `df -h {location}`.", location="/o"
    )
    no_driver_yet = item(
        "npus", WARN, "No NPU driver yet; the plan installs it", "Nothing to do before installing."
    )
    # A line stored before templates existed: translated as a whole where the catalog knows it.
    stored_earlier = {"check": "npus", "status": "fail", "detail": "No NPU driver installed", "fix": ""}
    all_ok = item("npus", PASS, "{count} NPUs, all OK", count=8)
    NodeStack.objects.create(node=node, preflight=[unmeasured, all_ok, no_driver_yet, stored_earlier])
    return node


def test_the_preflight_checklist_is_shown_in_chinese_with_its_values_filled_in(charlie, node_with_checklist):
    page = client_in("zh-hans", charlie).get("/provisioning/nodes/zh-node/").content.decode()
    assert "/o：未测量剩余空间" in page
    assert "请检查 `df -h /o`。" in page
    assert "8 个 NPU，全部正常" in page
    assert "未安装 NPU 驱动" in page
    assert "free space not measured" not in page


def test_the_same_checklist_stays_english_for_an_english_viewer(charlie, node_with_checklist):
    page = client_in("en", charlie).get("/provisioning/nodes/zh-node/").content.decode()
    assert "/o: free space not measured" in page
    assert "Check `df -h /o`." in page


def test_an_agent_written_deployment_reason_is_translated_on_pages_and_in_reason_display(charlie):
    model = Model.objects.create(name="zh-model")
    Deployment.objects.create(
        name="zh-deployment",
        model=model,
        observed_state=DeploymentState.FAILED,
        reason="No NPU driver installed",
    )
    client = client_in("zh-hans", charlie)
    assert "未安装 NPU 驱动" in client.get("/deployments/zh-deployment/").content.decode()
    assert "未安装 NPU 驱动" in client.get("/deployments/").content.decode()
    api = api_client_for(charlie).get("/api/v1/deployments/", HTTP_ACCEPT_LANGUAGE="zh-hans").json()
    assert api["results"][0]["reason"] == "No NPU driver installed"
    # What the deployment page shows when a live status update changes the reason.
    assert api["results"][0]["reason_display"] == "未安装 NPU 驱动"


def test_the_operation_kind_model_copy_and_a_model_copy_are_told_apart(charlie):
    from django.utils import translation

    from panel.deployments.pages.forms import ModelStepForm

    with translation.override("zh-hans"):
        assert OperationKind.COPY_MODEL.label == "复制模型"
        assert str(ModelStepForm.base_fields["artifact"].label) == "模型副本"


def test_a_reason_the_panel_composed_is_translated_part_by_part_with_its_numbers(charlie):
    from panel.deployments import reasons

    model = Model.objects.create(name="zh-model")
    deployment = Deployment(name="zh-gave-up", model=model, observed_state=DeploymentState.FAILED)
    health = reasons.part("/health failed {n} times in a row.", n=3)
    deployment.set_reason(reasons.gave_up([health], 5))
    deployment.save()
    assert deployment.reason == "/health failed 3 times in a row. Gave up after 5 failed restarts."
    page = client_in("zh-hans", charlie).get("/deployments/zh-gave-up/").content.decode()
    assert "/health 连续失败 3 次。 重启失败 5 次后已放弃。" in page


def test_a_reason_written_without_parts_is_not_shown_from_stale_ones(charlie):
    from panel.deployments import reasons

    model = Model.objects.create(name="zh-model")
    deployment = Deployment(name="zh-stale", model=model, observed_state=DeploymentState.FAILED)
    deployment.set_reason([reasons.part("Restart asked by the panel")])
    deployment.reason = "Node gone-node was removed."  # as the admin or an older writer sets it
    deployment.save()
    page = client_in("zh-hans", charlie).get("/deployments/zh-stale/").content.decode()
    assert "Node gone-node was removed." in page
    assert "面板请求重启" not in page


def test_a_failed_launch_shows_the_agents_error_and_hint_translated(charlie):
    from panel.deployments import reasons

    model = Model.objects.create(name="zh-model")
    deployment = Deployment(name="zh-launch", model=model, observed_state=DeploymentState.UNHEALTHY)
    deployment.set_reason(
        reasons.launch_failed("No NPU driver installed", "Upload the driver and firmware packages.")
    )
    deployment.save()
    assert deployment.reason == "No NPU driver installed — Upload the driver and firmware packages."
    page = client_in("zh-hans", charlie).get("/deployments/").content.decode()
    assert "未安装 NPU 驱动 — 请上传驱动和固件软件包。" in page


def test_an_install_error_and_its_hint_lines_are_translated_part_by_part(charlie):
    """The agent's error (a step's template filled with a translatable message) and hint (lines, one of them
    "{title}: {hint}") go as msgids and params; the page fills each translation with its translated values."""
    from panel.operations.models import Operation
    from tests.conftest import sent_by_the_agent
    from tests.integration.conftest import ingest_as_its_node
    from workers.ascend.signatures import SIGNATURES
    from workers.i18n import gettext_noop as _
    from workers.i18n import join_lines, message_of
    from workers.steps.base import StepFailed

    oom = next(s for s in SIGNATURES if s.code == "npu_oom")
    failed = StepFailed("cann_toolkit", _("finished, but its result is not there (check still fails)"))
    hint = join_lines(
        [
            _("Upload the driver and firmware packages."),
            _("{title}: {hint}").format(title=oom.title, hint=oom.hint),
        ]
    )
    node = Node.objects.create(name="zh-install-node")
    operation = Operation.objects.create(kind=OperationKind.INSTALL, node=node)
    agent = sent_by_the_agent(
        operation, lambda emitter: emitter.finish("failed", error=message_of(failed), hint=hint)
    )
    for batch in agent:
        ingest_as_its_node(batch)
    page = client_in("zh-hans", charlie).get(f"/operations/{operation.pk}/").content.decode()
    assert "步骤 cann_toolkit：" in page
    assert "finished, but its result is not there" not in page
    assert "请上传驱动和固件软件包。" in page
    with translation.override("zh-hans"):
        assert f"{translation.gettext(oom.title)}：{translation.gettext(oom.hint)}" in page
    english = client_in("en", charlie).get(f"/operations/{operation.pk}/").content.decode()
    assert "step cann_toolkit: finished, but its result is not there" in english


def test_the_provisioning_overview_lists_each_nodes_stack_from_the_sidebar(charlie):
    node = Node.objects.create(name="prov-overview")
    NodeStack.objects.create(node=node, status="installed", profile="0.11.0")
    Node.objects.create(name="bare-node")
    page = client_in("zh-hans", charlie).get("/provisioning/").content.decode()
    assert 'href="/provisioning/" class="active"' in page
    assert 'href="/provisioning/nodes/prov-overview/"' in page
    assert "0.11.0" in page
    assert 'data-node="bare-node"' in page
