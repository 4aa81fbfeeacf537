"""A node's provisioning page keeps the profile its last preflight checked selected, and Install installs
exactly that profile; the checklist's hints name the Package store as the UI does."""

import re

import pytest
from django.test import Client

from panel.core.domain.choices import OperationKind
from panel.nodes.models import Node, Npu
from panel.operations.models import Operation

pytestmark = pytest.mark.django_db
CHECKED, OTHER = "0.13.0", "0.11.0"


@pytest.fixture
def node():
    node = Node.objects.create(name="prov-node", transport="agent")
    Npu.objects.create(node=node, npu_id=0, chip_id=0, logic_id=0, name="910B3", hbm_total_mb=65536)
    return node


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def selected_profile(html: str) -> str:
    select = re.search(r'<select name="profile".*?</select>', html, re.S).group(0)
    return re.search(r'<option value="([^"]+)"[^>]*selected', select).group(1)


def preflight(client, node, profile):
    response = client.post(
        f"/provisioning/nodes/{node.name}/preflight/", {"profile": profile, "pip_source": "auto"}
    )
    assert response.status_code == 302, response.content[:500]


def passed(node):
    """The node's preflight ended as the agent ends it, its checklist without a failed row."""
    from panel.provisioning.services import record_outcome, stack_of

    operation = stack_of(node).preflight_operation
    operation.status, operation.result = "succeeded", {"checklist": [{"check": "os", "status": "pass"}]}
    operation.save()
    record_outcome(operation)


def test_after_a_preflight_the_page_keeps_its_profile_selected(bob, node):
    client = signed_in(bob)
    preflight(client, node, CHECKED)
    html = client.get(f"/provisioning/nodes/{node.name}/").content.decode()
    assert selected_profile(html) == CHECKED
    assert f'name="checked_profile" value="{CHECKED}"' in html


def test_install_refuses_a_profile_other_than_the_one_the_preflight_checked(bob, node):
    client = signed_in(bob)
    preflight(client, node, CHECKED)
    form = {"profile": OTHER, "checked_profile": CHECKED, "pip_source": "auto"}
    response = client.post(f"/provisioning/nodes/{node.name}/install/", form, follow=True)
    assert not Operation.objects.filter(kind=OperationKind.INSTALL).exists()
    page = response.content.decode()
    assert f"The preflight on this page checked profile {CHECKED}, not {OTHER}" in page

    form["profile"] = CHECKED
    passed(node)  # an install waits for its preflight's checklist (panel.provisioning.gate)
    client.post(f"/provisioning/nodes/{node.name}/install/", form)
    install = Operation.objects.get(kind=OperationKind.INSTALL)
    assert install.params["profile"] == CHECKED
    html = client.get(f"/provisioning/nodes/{node.name}/").content.decode()
    assert selected_profile(html) == CHECKED  # the install is newer than the preflight: its profile stays


def test_a_missing_package_hint_names_the_package_store():
    from workers.steps.base import StepSpec
    from workers.steps.preflight import check_sources

    step = StepSpec(
        name="cann_toolkit", title="", kind="run_package", params={"path": "/pkgs/Ascend-cann-toolkit.run"}
    )
    results = check_sources({"packages_present": []}, [step])
    assert results[0]["fix"] == "Upload them to the Package store."
