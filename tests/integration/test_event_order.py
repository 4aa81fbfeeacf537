"""An install's event batches stored out of order: what the panel keeps and derives follows the agent's
numbers, never the order the batches arrived in (a late batch is stored after a newer one)."""

import pytest

from panel.nodes.models import Node
from panel.operations.models import Operation
from panel.operations.ordering import step_states
from panel.provisioning.models import StackStatus
from panel.provisioning.services import stack_of
from tests.conftest import api_client_for
from tests.integration.conftest import event_batch, ingest_as_its_node

pytestmark = pytest.mark.django_db


def step(name, state):
    return {
        "line": f"== {name}: {state}",
        "stream": "stdout",
        "step": name,
        "title": name,
        "step_state": state,
    }


@pytest.fixture
def install():
    node = Node.objects.create(name="n1")
    operation = Operation.objects.create(kind="install", node=node, target="n1")
    stack = stack_of(node)
    stack.status, stack.install_operation = StackStatus.INSTALLING, operation
    stack.save()
    return operation


def reboot_then(install, last_step_state, end):
    """The agent's batches of an install whose reboot step asked for a reboot, was run again and found it
    done ("failed" then "skipped"), then ran the venv step to `last_step_state` and ended `end`."""
    first = event_batch(
        install,
        (1, "state", {"state": "running"}),
        (2, "progress", {"percent": 40, "stage": "Reboot"}),
        (3, "log", step("reboot", "checking")),
        (4, "log", step("reboot", "running")),
        (5, "log", step("reboot", "failed")),
    )
    second = event_batch(
        install,
        (6, "log", step("reboot", "checking")),
        (7, "log", step("reboot", "skipped")),
        (8, "progress", {"percent": 80, "stage": "venv"}),
        (9, "log", step("venv", "checking")),
        (10, "log", step("venv", last_step_state)),
        (11, "state", end),
        final_seq=11,
    )
    return first, second


def test_a_late_batch_does_not_undo_a_succeeded_installs_step_states(install, alice):
    first, second = reboot_then(install, "done", {"state": "succeeded", "result": {}})
    ingest_as_its_node(second)
    ingest_as_its_node(first)  # stored after: its panel seq numbers are the larger ones

    install.refresh_from_db()
    assert (install.status, install.progress, install.stage) == ("succeeded", 100.0, "venv")
    body = api_client_for(alice).get(f"/api/v1/operations/{install.pk}/events/").json()
    assert [e["agent_seq"] for e in body["results"]][:2] == [6, 7]  # stored in arrival order
    assert step_states(body["results"]) == {"reboot": "skipped", "venv": "done"}
    assert stack_of(install.node).status == StackStatus.INSTALLED


def test_a_late_batch_does_not_move_a_failed_install_to_waiting_for_a_reboot(install):
    first, second = reboot_then(install, "failed", {"state": "failed", "error": "step venv: no python"})
    ingest_as_its_node(second)
    ingest_as_its_node(first)  # after the end: what the install left is worked out again, in agent order

    stack = stack_of(install.node)
    assert (stack.status, stack.failed_step) == (StackStatus.FAILED, "venv")


def test_the_step_an_install_failed_at_is_kept_when_its_batch_arrives_after_the_end(install):
    steps = event_batch(
        install,
        (1, "state", {"state": "running"}),
        (
            2,
            "log",
            {"line": "Plan", "steps": [{"name": "venv", "title": "venv"}], "specs": [{"name": "venv"}]},
        ),
        (3, "log", step("venv", "checking")),
        (4, "log", step("venv", "failed")),
    )
    end = event_batch(
        install, (5, "state", {"state": "failed", "error": "step venv: no python"}), final_seq=5
    )
    ingest_as_its_node(end)
    assert stack_of(install.node).failed_step == ""  # nothing said where it stopped yet
    ingest_as_its_node(steps)

    stack = stack_of(install.node)
    assert (stack.status, stack.failed_step, stack.plan) == (StackStatus.FAILED, "venv", [{"name": "venv"}])


def test_progress_never_goes_back_when_an_older_batch_arrives(install):
    first, second = reboot_then(install, "running", {"state": "running"})
    second["events"] = second["events"][:-1]  # still running
    ingest_as_its_node(second)
    ingest_as_its_node(first)

    install.refresh_from_db()
    assert (install.progress, install.stage) == (80.0, "venv")
    assert install.events.get(agent_seq=1).seq > install.events.get(agent_seq=10).seq
