"""An install never runs over a failed preflight: a failed row blocks it (the answer says how many and what
to fix) until an admin overrides each failed row with a reason, which the audit log keeps. Profiles are
offered, and taken, only for the chips and drivers they fit."""

import re

import pytest
from django.test import Client
from django.utils import timezone

from panel.audit.models import AuditEntry
from panel.core.domain.choices import OperationKind
from panel.nodes.models import Node, Npu
from panel.operations.models import Operation
from panel.provisioning.services import stack_of
from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db
PROFILE = "0.11.0"
CHECKLIST = [
    {"check": "os", "status": "pass", "detail": "openEuler 22.03", "fix": ""},
    {"check": "packages", "status": "fail", "detail": "Missing packages: nnal.run", "fix": "Upload them."},
    {"check": "python", "status": "fail", "detail": "No Python 3.9-3.11", "fix": "Install python3.11."},
    {"check": "hugepages", "status": "warn", "detail": "not measured", "fix": "Check /proc/meminfo."},
]


@pytest.fixture
def node():
    node = Node.objects.create(name="gate-node", transport="agent")
    Npu.objects.create(node=node, npu_id=0, chip_id=0, logic_id=0, name="910B3", hbm_total_mb=65536)
    return node


def checked(node, checklist=CHECKLIST, profile=PROFILE, status="succeeded"):
    """The node's preflight of `profile` ended `status` with `checklist`, as the agent's result records it."""
    operation = Operation.objects.create(
        kind=OperationKind.PREFLIGHT, node=node, target=node.name, params={"profile": profile}, status=status
    )
    stack = stack_of(node)
    stack.preflight_operation, stack.preflight, stack.preflight_profile = operation, checklist, profile
    stack.preflight_at = timezone.now()
    stack.save()
    return operation


def install(user, node, **body):
    return api_client_for(user).post(
        f"/api/v1/node-stacks/{node.name}/install/", {"profile": PROFILE, **body}, format="json"
    )


def installs():
    return Operation.objects.filter(kind=OperationKind.INSTALL)


def test_a_failed_row_blocks_the_install_and_the_answer_says_how_many_and_the_fix(node, alice):
    checked(node)
    response = install(alice, node)
    assert response.status_code == 400, response.json()
    messages = response.json()["errors"]["preflight"]
    assert messages[0].startswith("2 preflight checks failed for 0.11.0: the install is blocked.")
    assert messages[1:] == [
        "packages: Missing packages: nnal.run. Fix: Upload them.",
        "python: No Python 3.9-3.11. Fix: Install python3.11.",
    ]
    assert not installs().exists()


def test_an_admin_overrides_each_failed_row_with_a_reason_and_the_audit_log_keeps_it(node, alice):
    checked(node)
    reasons = {"packages": "nnal comes from the site mirror", "python": "python3.11 is baked in the image"}
    assert install(alice, node, overrides={"packages": reasons["packages"]}).status_code == 400  # one left

    response = install(alice, node, overrides=reasons)
    assert response.status_code == 202, response.json()
    operation = installs().get()
    assert operation.params["preflight_overrides"] == reasons
    assert operation.task_kwargs["request"]["preflight_overrides"] == reasons  # the agent checks again
    entry = AuditEntry.objects.get(action="install.preflight_overridden")
    assert (entry.actor, entry.target) == (alice, node.name)
    assert entry.details["overrides"] == reasons
    assert entry.details["failed"]["packages"] == "Missing packages: nnal.run"


def test_only_an_admin_may_override(node, bob):
    checked(node)
    response = install(bob, node, overrides={"packages": "trust me"})
    assert response.status_code == 403
    assert "Only an admin may override" in response.json()["detail"]
    assert not installs().exists()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"packages": "  ", "python": "ok"}, "overrides.packages: This field may not be blank."),
        ({"packages": "a", "python": "b", "os": "c"}, "Nothing to override: os did not fail"),
    ],
)
def test_an_override_needs_a_reason_and_a_failed_row(node, alice, overrides, message):
    checked(node)
    response = install(alice, node, overrides=overrides)
    assert response.status_code == 400
    assert message in str(response.json())


def test_a_preflight_that_did_not_finish_blocks_the_install_until_it_runs_again(node, alice):
    checked(node, checklist=[], status="failed")
    response = install(alice, node)
    assert response.status_code == 400
    assert (
        "The preflight of 0.11.0 did not finish (Failed): run it again."
        in response.json()["errors"]["preflight"]
    )


def test_a_passing_preflight_or_one_of_another_profile_does_not_block(node, alice):
    checked(node, checklist=CHECKLIST, profile="0.13.0")
    assert install(alice, node).status_code == 202


def test_the_page_says_how_many_failed_and_an_admin_installs_over_them_with_reasons(node, alice, bob):
    checked(node)
    operator = Client()
    operator.force_login(bob)
    page = operator.get(f"/provisioning/nodes/{node.name}/").content.decode()
    assert 'data-testid="preflight-failed"' in page
    assert "2 failed" in page
    assert 'name="override-packages"' not in page  # operators fix, admins may override
    form = {"profile": PROFILE, "checked_profile": PROFILE, "pip_source": "auto"}
    blocked = operator.post(f"/provisioning/nodes/{node.name}/install/", form, follow=True)
    assert "2 preflight checks failed for 0.11.0" in blocked.content.decode()
    assert not installs().exists()

    admin = Client()
    admin.force_login(alice)
    assert (
        'name="override-packages" form="profile-form"'
        in admin.get(f"/provisioning/nodes/{node.name}/").content.decode()
    )
    reasons = {"override-packages": "mirror", "override-python": "image"}
    admin.post(f"/provisioning/nodes/{node.name}/install/", {**form, **reasons})
    assert installs().get().params["preflight_overrides"] == {"packages": "mirror", "python": "image"}


# --- profiles that fit the node ------------------------------------------------------------------------


@pytest.fixture
def duo():
    node = Node.objects.create(name="duo-node", transport="agent")
    Npu.objects.create(node=node, npu_id=0, chip_id=0, logic_id=0, name="310P3", memory_total_mb=44280)
    return node


def test_a_profile_for_another_chip_is_refused_naming_the_chip(duo, alice):
    for action in ("preflight", "install"):
        response = api_client_for(alice).post(
            f"/api/v1/node-stacks/{duo.name}/{action}/", {"profile": "0.9.1"}, format="json"
        )
        assert response.status_code == 400
        assert (
            "does not support the Atlas 300I Duo/Pro (310P) NPUs of duo-node"
            in response.json()["errors"]["profile"][0]
        )
    assert not Operation.objects.exists()


def test_the_page_offers_only_the_profiles_for_the_nodes_chip(duo, bob):
    client = Client()
    client.force_login(bob)
    page = client.get(f"/provisioning/nodes/{duo.name}/").content.decode()
    offered = re.findall(
        r'<option value="([^"]+)"', re.search(r'<select name="profile".*?</select>', page, re.S)[0]
    )
    assert offered == ["0.23.0", "0.18.0", "0.13.0", "0.11.0", "cpu"]  # 0.9.1 and 0.7.3 do not list 310P


def test_a_profile_whose_driver_the_node_lacks_and_the_store_cannot_give_is_refused(node, alice):
    node.versions = {"driver": "24.1.rc2"}
    node.save()
    response = install(alice, node, profile="0.23.0")
    assert response.status_code == 400
    assert "needs an NPU driver" in response.json()["errors"]["profile"][0]
    assert "gate-node has 24.1.rc2" in response.json()["errors"]["profile"][0]
