"""The container runtime with real parts: API → Celery (Redis) → the agent on a simulated A2 host → the sim
engine inside a real podman container → probes, logs → the container killed: restarted with back-off →
the agent restarted with its record lost: the container found by label and adopted → delete: the
container gone. And an image archive from the package store loaded on the node, its sha256 checked.

Needs rootful podman set up as .ci/run does (runc, cgroupfs, no default ulimits); skips saying why
otherwise."""

import contextlib
import json
import subprocess

import pytest

import panel.deployments.tasks  # noqa: F401  registers the panel's probe ingest on the shared app
from tests import container_images
from tests.conftest import api_client_for
from tests.deployment_helpers import (
    deployment_json,
    free_port_pair,
    kill_recorded_engines,
    reconcile_loop,  # noqa: F401  a fixture, used by name
    wait_for,
)

NODE = "box-node"
pytestmark = [
    pytest.mark.container,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(420),
    pytest.mark.skipif(bool(container_images.podman_ready()), reason=container_images.podman_ready() or "ok"),
]


def podman(*args, check=True):
    return subprocess.run(
        [container_images.PODMAN, *args], capture_output=True, text=True, check=check, timeout=120
    )


@pytest.fixture(scope="module")
def sim_image(tmp_path_factory):
    return container_images.sim_engine_image(tmp_path_factory.mktemp("sim-image"))


@pytest.fixture
def box(_wired_to_redis, transactional_db, monkeypatch, sim_host, sim_image):
    """A sim host whose agent runs engines in podman; `box.agent()` starts (and restarts) its worker."""
    root, env = sim_host(name=NODE)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("ASCEND_PANEL_CONTAINER_ENGINE", "podman")
    monkeypatch.setenv("ASCEND_PANEL_CONTAINER_MOUNTS", container_images.sim_mounts(root))
    names = "ASCEND_PANEL_SIM_ROOT SIM_ENGINE_START_DELAY SIM_ENGINE_STATS_INTERVAL"
    monkeypatch.setenv("ASCEND_PANEL_CONTAINER_ENV", names)
    monkeypatch.setenv("SIM_ENGINE_START_DELAY", "0.5")
    monkeypatch.setenv("SIM_ENGINE_STATS_INTERVAL", "1")

    class Box:
        sim_root = root

        @staticmethod
        @contextlib.contextmanager
        def agent():
            from celery.contrib.testing.worker import start_worker

            import panel.nodes.tasks  # registers the panel tasks
            import panel.operations.tasks  # noqa: F401
            import workers.tasks  # noqa: F401  registers the agent tasks
            from workers.celery_app import app
            from workers.task_names import PANEL_QUEUE, node_queue

            with start_worker(
                app,
                pool="threads",
                concurrency=4,
                perform_ping_check=False,
                queues=[PANEL_QUEUE, node_queue(NODE)],
                loglevel="WARNING",
                shutdown_timeout=30,
            ) as worker:
                yield worker

    yield Box
    container_images.remove_labelled_containers(NODE)
    kill_recorded_engines(root)


@pytest.fixture(autouse=True)
def own_ports(settings):
    settings.PANEL_DEPLOY_BASE_PORT = free_port_pair()


def operation_done(client, operation_id, timeout=120):
    def finished():
        body = client.get(f"/api/v1/operations/{operation_id}/").json()
        return body if body["status"] in ("succeeded", "failed", "cancelled") else None

    return wait_for(finished, timeout, f"operation {operation_id}")


def inventoried_node(client):
    from panel.nodes.models import Node

    node = Node.objects.create(name=NODE, transport="agent")
    started = client.post(f"/api/v1/nodes/{node.pk}/inventory/")
    assert started.status_code == 202, started.json()
    done = operation_done(client, started.json()["id"])
    assert done["status"] == "succeeded", done
    node.refresh_from_db()
    return node


def tiny_model(tmp_path):
    from panel.catalog.models import Model
    from workers.models.inspect import inspect_model
    from workers.models.tiny import main as make_tiny

    folder = tmp_path / "tiny-llama"
    assert make_tiny([str(folder), "--arch", "llama"]) == 0
    return folder, Model.objects.create(name="tiny-llama", facts=inspect_model(folder))


def labelled(label_value):
    listed = podman("ps", "-q", "--no-trunc", "--filter", f"label=ascend-panel.deployment={label_value}")
    return listed.stdout.split()


@pytest.mark.usefixtures("reconcile_loop")
def test_a_container_deployment_lives_restarts_is_adopted_and_goes(box, bob, tmp_path):
    from workers.containers import lifecycle
    from workers.sim import state as sim_state

    client = api_client_for(bob)
    folder, model = tiny_model(tmp_path)
    with box.agent():
        node = inventoried_node(client)
        facts = node.facts["containers"]
        assert facts["engine"] == "podman"
        assert container_images.SIM_IMAGE in [
            i["reference"] for i in client.get(f"/api/v1/nodes/{node.pk}/images/").json()["images"]
        ]
        body = {
            "name": "boxed",
            "model": model.pk,
            "path": str(folder),
            "nodes": [{"node": NODE, "npus": [2]}],
            "runtime": "container",
            "image": container_images.SIM_IMAGE,
        }
        review = client.post("/api/v1/deployments/plan/", body, format="json")
        assert review.status_code == 200, review.json()
        assert review.json()["nodes"][0]["command"].startswith("podman run -d --name ascend-panel-boxed ")
        created = client.post("/api/v1/deployments/", body, format="json")
        assert created.status_code == 201, created.json()
        pk = created.json()["id"]

        running = wait_for(lambda: deployment_json(client, pk)["status"] == "running", 90, "running")
        assert running
        first = deployment_json(client, pk)["runtime"]["nodes"][NODE]
        assert labelled("boxed") == [first["container_id"]]
        holders = sim_state.live_holders(sim_state.load(box.sim_root))
        assert [h["logic_ids"] for h in holders] == [[2]]  # the NPU it was handed as /dev/davinci2

        def log_lines():
            return [
                e["line"] for e in client.get(f"/api/v1/deployments/{pk}/logs/?after_seq=0").json()["results"]
            ]

        wait_for(lambda: "Application startup complete." in " ".join(log_lines()), 20, "the engine's log")
        # The engine holds its API key, handed over by name only: the run line in the log never shows it.
        env = json.loads(podman("inspect", "--format", "{{json .Config.Env}}", first["container_id"]).stdout)
        key = next(item.split("=", 1)[1] for item in env if item.startswith("VLLM_API_KEY="))
        from panel.operations.models import OperationEvent

        run_lines = [e.payload.get("line", "") for e in OperationEvent.objects.filter(kind="log")]
        assert any(" -e VLLM_API_KEY " in line for line in run_lines if line.startswith("$ podman run"))
        assert key
        assert not any(key in line for line in run_lines)
        from panel.accounts.models import ApiToken

        _token, raw = ApiToken.issue(bob, "playground")
        chat = client.post(
            f"/api/v1/deployments/{pk}/chat/",
            {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4},
            format="json",
            HTTP_AUTHORIZATION=f"Bearer {raw}",
        )
        assert chat.status_code == 200, chat.content
        refused = client.post(
            f"/api/v1/nodes/{node.pk}/images/remove/", {"image": container_images.SIM_IMAGE}
        )
        assert refused.status_code == 409
        assert "boxed" in refused.json()["detail"]

        podman("kill", first["container_id"])

        def restarted():
            current = deployment_json(client, pk)
            now = (current["runtime"].get("nodes") or {}).get(NODE, {}).get("container_id")
            return current["status"] == "running" and now not in (None, first["container_id"]) and current

        after = wait_for(restarted, 60, "a restarted container")
        assert after["restart_count"] == 1
        assert any("the container exited with code 137" in line for line in log_lines())
        second = after["runtime"]["nodes"][NODE]["container_id"]
        assert labelled("boxed") == [second]

    # The agent is gone, its record of the container with it; the container runs on.
    lifecycle.forget_record(str(box.sim_root), "boxed")
    seen = len(log_lines())
    with box.agent():
        wait_for(lambda: lifecycle.load_record(str(box.sim_root), "boxed") is not None, 30, "found by label")
        assert lifecycle.load_record(str(box.sim_root), "boxed").container_id == second
        wait_for(lambda: len(log_lines()) > seen + 2, 30, "log lines of the adopted container")
        kept = deployment_json(client, pk)
        assert (kept["status"], kept["restart_count"]) == ("running", 1)
        assert kept["runtime"]["nodes"][NODE]["container_id"] == second
        # Two containers started; the adopted one's follower resumed after its last line, replaying none.
        assert sum("Application startup complete." in line for line in log_lines()) == 2

        assert client.delete(f"/api/v1/deployments/{pk}/").status_code == 202
        wait_for(lambda: client.get(f"/api/v1/deployments/{pk}/").status_code == 404, 60, "deleted")
        assert (
            podman("ps", "-a", "-q", "--filter", "label=ascend-panel.deployment=boxed").stdout.split() == []
        )
        assert sim_state.live_holders(sim_state.load(box.sim_root)) == []


def test_an_image_archive_from_the_package_store_is_loaded_on_the_node(
    box, alice, tmp_path, live_server, settings
):
    from panel.provisioning.store import add_local_file

    loaded = "localhost/ascend-panel-test/sim-engine:loaded"
    podman("tag", container_images.SIM_IMAGE, loaded)
    archive = container_images.save(loaded, tmp_path / "sim-engine_loaded.tar")
    podman("rmi", loaded)
    package = add_local_file(archive, alice)
    settings.PANEL_URL = live_server.url  # where the agent fetches the archive from
    assert package.kind == "image"
    client = api_client_for(alice)
    try:
        with box.agent():
            node = inventoried_node(client)
            started = client.post(f"/api/v1/nodes/{node.pk}/images/load/", {"package": package.pk})
            assert started.status_code == 202, started.json()
            done = operation_done(client, started.json()["id"])
            assert done["status"] == "succeeded", done
            assert done["result"]["loaded"] == [loaded]
            listed = client.get(f"/api/v1/nodes/{node.pk}/images/").json()["images"]
            assert loaded in [image["reference"] for image in listed]

            removed = client.post(f"/api/v1/nodes/{node.pk}/images/remove/", {"image": loaded})
            assert removed.status_code == 202
            assert operation_done(client, removed.json()["id"])["status"] == "succeeded"
            assert podman("image", "exists", loaded, check=False).returncode == 1
    finally:
        podman("rmi", "-f", loaded, check=False)


@pytest.mark.skipif(bool(container_images.registry_ready()), reason=container_images.registry_ready() or "ok")
def test_an_image_is_pulled_through_the_mirror_with_progress_and_named_as_asked(box, bob, tmp_path, settings):
    wanted = "localhost/ascend-panel-test/sim-engine:pulled"
    client = api_client_for(bob)
    with container_images.local_registry(tmp_path) as registry:
        container_images.push(
            container_images.SIM_IMAGE, f"{registry}/mirror/ascend-panel-test/sim-engine:pulled"
        )
        settings.PANEL_IMAGE_MIRROR = f"{registry}/mirror"
        try:
            with box.agent():
                node = inventoried_node(client)
                started = client.post(f"/api/v1/nodes/{node.pk}/images/pull/", {"image": wanted})
                assert started.status_code == 202, started.json()
                done = operation_done(client, started.json()["id"])
                assert done["status"] == "succeeded", done
                events = client.get(f"/api/v1/operations/{done['id']}/events/").json()["results"]
                stages = [e["payload"].get("stage", "") for e in events if e["kind"] == "progress"]
                assert any("layers" in stage for stage in stages), stages
                assert podman("image", "exists", wanted, check=False).returncode == 0
                listed = client.get(f"/api/v1/nodes/{node.pk}/images/").json()["images"]
                assert wanted in [image["reference"] for image in listed]
        finally:
            podman("rmi", "-f", wanted, f"{registry}/mirror/ascend-panel-test/sim-engine:pulled", check=False)
