"""Several models per NPU on a sim host (issue 36 item 3, docs/serving-plane.md §6): two deployments that
share their NPUs (`placement.share`) go on one NPU when their gpu_memory_utilization shares add up, each with
its own port and the NPU in ASCEND_RT_VISIBLE_DEVICES; their sim engines hold HBM in the sim root and the
agent's sampler reads the sum; a third is refused with the NPU's figures, read from that sample; once one
of them sleeps at level 2 (its HBM given back) the third fits."""

import httpx
import pytest

from tests.conftest import api_client_for
from tests.sim_engine_process import start_engine, stop, wait_healthy

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.fixture
def sim_node(sim_host, monkeypatch, settings, _wired_to_redis, tmp_path):
    """sim-a2 (a sim host root, its npu-smi on PATH) with its NPUs in the inventory and a tiny model on it."""
    from panel.catalog.models import Model, ModelArtifact
    from panel.monitoring import services
    from panel.monitoring.metrics import store
    from panel.nodes.models import Node, Npu
    from workers.models.inspect import inspect_model
    from workers.models.tiny import main as make_tiny

    settings.REDIS_URL = _wired_to_redis
    root, env = sim_host(name="sim-a2")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    node = Node.objects.create(name="sim-a2", transport="agent", status="online", address="127.0.0.1")
    for logic_id in range(8):
        Npu.objects.create(
            node=node, npu_id=logic_id, logic_id=logic_id, name="910B3", hbm_total_mb=65536, numa_node=0
        )
    assert make_tiny([str(tmp_path / "tiny"), "--arch", "qwen2"]) == 0
    model = Model.objects.create(
        name="tiny-qwen", repo_id="Acme/Tiny", facts=inspect_model(tmp_path / "tiny")
    )
    ModelArtifact.objects.create(model=model, node=node, path="/models/tiny-qwen", ready=True)
    store.forget_node(node.name)
    services.nodes.forget()
    engines = []
    yield node, root, engines
    for process in engines:
        stop(process)
    store.forget_node(node.name)
    services.nodes.forget()


def body(utilization, npus=(0,), share=True):
    return {
        "model": "tiny-qwen",
        "path": "/models/tiny-qwen",
        "placement": {
            "node": "sim-a2",
            "npus": npus if isinstance(npus, int) else list(npus),
            "share": share,
        },
        "engine": {"max_model_len": 2048, "gpu_memory_utilization": utilization},
    }


def launched(name):
    """The deployment's launch as the agent renders it (argv and env) from what it is sent, once its pending
    launch ran."""
    from panel.deployments.models import Deployment
    from tests.integration.test_deployment_apply import finish, pending
    from workers.engine.launch.command import build_launch
    from workers.engine.launch.launch_spec import launch_spec_from_payload

    (launch,) = pending("deploy")
    payload = launch.task_kwargs["payload"]["spec"]
    finish(launch, result={"runtime": {"pid": 1, "port": 0, "log_path": "/x.log"}})
    deployment = Deployment.objects.get(name=name)
    return deployment, build_launch(launch_spec_from_payload(payload, log_path="/x.log", venv_path="/venv"))


def serve(engines, deployment, launch, *extra, env=None):
    """A sim engine on the deployment's port and NPUs with the launch's --gpu-memory-utilization, on the sim
    host."""
    port = deployment.spec["port"]
    utilization = launch.argv[launch.argv.index("--gpu-memory-utilization") + 1]
    process = start_engine(
        port,
        "--gpu-memory-utilization", utilization, *extra,
        env={"ASCEND_RT_VISIBLE_DEVICES": ",".join(map(str, deployment.spec["logic_ids"])), **(env or {})},
    )  # fmt: skip
    engines.append(process)
    wait_healthy(f"http://127.0.0.1:{port}", process)
    return f"http://127.0.0.1:{port}"


def sample(node):
    """One tick of the agent's sampler on the sim host, through the panel's ingest; NPU 0's figures."""
    from panel.monitoring.services import ingest_metrics
    from workers.contracts import MetricBatch
    from workers.sampler import Sampler

    taken = Sampler().sample()
    ingest_metrics(MetricBatch(node=node.name, samples=[taken], seq=1).model_dump(mode="json"))
    return next(chip for chip in taken.npus if chip.logic_id == 0)


def test_two_deployments_share_one_sim_npu_and_a_third_is_refused_until_one_sleeps_at_level_2(sim_node, bob):
    from panel.deployments import sleep_state

    node, _root, engines = sim_node
    client = api_client_for(bob)
    idle = sample(node)
    assert idle.processes == []

    created = client.put("/api/v1/deployments/small-a/", body(0.4), format="json")
    assert created.status_code == 201, created.json()
    first, first_launch = launched("small-a")
    first_url = serve(engines, first, first_launch, "--enable-sleep-mode", env={"VLLM_SERVER_DEV_MODE": "1"})

    # A deployment that does not share is not put beside it, and says whose NPU it is.
    alone = client.put("/api/v1/deployments/alone/", body(0.1, share=False), format="json")
    assert alone.status_code == 400
    assert "NPUs 0 of sim-a2 serve the deployment small-a." in str(alone.json())

    created = client.put("/api/v1/deployments/small-b/", body(0.4), format="json")
    assert created.status_code == 201, created.json()
    second, second_launch = launched("small-b")
    serve(engines, second, second_launch)

    # Each engine has its own port (and its DP RPC port); both see NPU 0 as their only device.
    assert first.spec["port"] != second.spec["port"]
    assert abs(first.spec["port"] - second.spec["port"]) >= 2
    # vllm-ascend caps the whole NPU with the flag (the sim engine sizes its HBM so too): small-b, launched
    # beside small-a, is given both shares, and takes its own 0.4 of them.
    for launch, utilization in ((first_launch, "0.4"), (second_launch, "0.8")):
        assert launch.env["ASCEND_RT_VISIBLE_DEVICES"] == "0"
        assert launch.argv[launch.argv.index("--gpu-memory-utilization") + 1] == utilization

    # npu-smi on the sim host shows both engines on NPU 0, and the HBM they hold adds up.
    shared = sample(node)
    assert len(shared.processes) == 2
    held = sum(process["memory_mb"] for process in shared.processes)
    assert held > 0
    assert shared.hbm_used_mb == idle.hbm_used_mb + held
    # Each took 0.4 of the chip: small-a alone from 0.4 less the idle figure, small-b from its cap of 0.8 less
    # all that was in use at its start (the idle figure and small-a's), as vllm-ascend sizes it.
    first_mb, second_mb = sorted(p["memory_mb"] for p in shared.processes)
    assert first_mb == int(65536 * 0.4) - idle.hbm_used_mb
    assert second_mb == int(65536 * 0.8) - idle.hbm_used_mb - first_mb

    # The spec export says it shares, and applying it again changes nothing.
    exported = client.get("/api/v1/deployments/small-b/?format=spec").json()
    assert exported["placement"] == {"node": "sim-a2", "npus": [0], "share": True}
    again = client.put("/api/v1/deployments/small-b/", exported, format="json")
    assert (again.status_code, again.json()["result"]) == (200, "unchanged")

    # A count with share: the shared NPU, fullest first, before a whole free one.
    counted = client.put("/api/v1/deployments/small-d/?dry_run=true", body(0.1, npus=1), format="json")
    assert counted.status_code == 201, counted.json()
    assert counted.json()["plan"]["nodes"][0]["logic_ids"] == [0]

    # A third at 0.4 does not fit: the refusal gives the NPU's figures.
    refused = client.put("/api/v1/deployments/small-c/", body(0.4), format="json")
    assert refused.status_code == 400
    text = str(refused.json())
    assert (
        "NPU 0 on sim-a2 has 12.2 GiB free of 64.0 GiB; small-c needs 24.4 GiB at gpu_memory_utilization 0.4."
        in text
    )

    # small-a sleeps at level 2: its engine frees its HBM and the ledger no longer counts its share.
    asleep = httpx.post(f"{first_url}/sleep", params={"level": 2}, timeout=10)
    assert asleep.status_code == 200
    sleep_state.mark_asleep(first.pk, 2)
    assert sample(node).hbm_used_mb < shared.hbm_used_mb
    dry = client.put("/api/v1/deployments/small-c/?dry_run=true", body(0.4), format="json")
    assert dry.status_code == 201, dry.json()
    notes = {warning["code"]: warning["message"] for warning in dry.json()["plan"]["warnings"]}
    # The sample (larger than the ledger here) counts small-b at 25.6 GiB where the ledger plans 24.4: the sim
    # sizes a lone engine from the whole chip less its idle figure, where the planner takes the share of the
    # chip less the driver's part (a real vllm-ascend start matched the planner), so the engine launched
    # beside another gets the difference. small-c takes 24.4 GiB of what is left.
    assert (
        notes["hbm_shared"]
        == "NPU 0 on sim-a2 is shared with small-a, small-b: 10.2 GiB of 64.0 GiB stay free."
    )
    assert notes["hbm_released_by_sleep"].startswith("small-a on NPU 0 of sim-a2 sleeps at level 2")


def test_replicas_that_share_go_on_different_npus_and_pack_beside_other_deployments(sim_node, bob):
    from panel.deployments.models import Deployment

    client = api_client_for(bob)
    other = client.put("/api/v1/deployments/other/", {**body(0.4), "state": "stopped"}, format="json")
    assert other.status_code == 201, other.json()
    twins = {**body(0.3, npus=1), "replicas": 2, "state": "stopped"}
    created = client.put("/api/v1/deployments/twins/", twins, format="json")
    assert created.status_code == 201, created.json()
    rows = Deployment.objects.filter(name__startswith="twins").order_by("name")
    placed = {row.name: sorted(npu.logic_id for npu in row.npus.all()) for row in rows}
    assert placed["twins"] == [0]  # beside `other`, the fullest NPU that fits
    assert len(placed) == 2
    assert placed[max(placed)] != [0]  # its replica on another NPU


def test_the_edit_page_keeps_a_deployment_sharing_its_npu(sim_node, bob):
    from panel.deployments.models import Deployment
    from tests.integration.test_deployment_edit_pages import edit_fields, page_client

    client = api_client_for(bob)
    for name in ("small-a", "small-b"):
        made = client.put(f"/api/v1/deployments/{name}/", {**body(0.4), "state": "stopped"}, format="json")
        assert made.status_code == 201, made.json()
    applied = page_client(bob).post(
        "/deployments/small-a/edit/", edit_fields("small-a", max_model_len=1024, confirm="1")
    )
    assert applied.status_code == 302
    edited = Deployment.objects.get(name="small-a")
    assert edited.spec["max_model_len"] == 1024
    exported = client.get("/api/v1/deployments/small-a/?format=spec").json()
    assert exported["placement"] == {"node": "sim-a2", "npus": [0], "share": True}


def test_tensor_parallel_engines_share_every_npu_of_their_group(sim_node, bob):
    # Two TP-2 engines on NPUs 0 and 1, each a share of both: the second is capped at both shares on each
    # NPU of its group; an engine on NPUs 1 and 2 is checked on each: NPU 1's tenants decide.
    client = api_client_for(bob)
    for name in ("tp-a", "tp-b"):
        created = client.put(f"/api/v1/deployments/{name}/", body(0.4, npus=(0, 1)), format="json")
        assert created.status_code == 201, created.json()
        deployment, launch = launched(name)
        assert launch.env["ASCEND_RT_VISIBLE_DEVICES"] == "0,1"
        assert launch.argv[launch.argv.index("--tensor-parallel-size") + 1] == "2"
    assert launch.argv[launch.argv.index("--gpu-memory-utilization") + 1] == "0.8"

    refused = client.put("/api/v1/deployments/tp-c/", body(0.3, npus=(1, 2)), format="json")
    assert refused.status_code == 400
    assert "NPU 1 on sim-a2 has" in str(refused.json())
    assert "NPU 2 on sim-a2" not in str(refused.json())  # a free NPU of the group is no refusal
    created = client.put("/api/v1/deployments/tp-d/", body(0.1, npus=(1, 2)), format="json")
    assert created.status_code == 201, created.json()
    _deployment, launch = launched("tp-d")
    assert launch.env["ASCEND_RT_VISIBLE_DEVICES"] == "1,2"
    # The fullest NPU of its group decides its cap: its own 0.1 and tp-a's and tp-b's 0.4 each on NPU 1.
    assert launch.argv[launch.argv.index("--gpu-memory-utilization") + 1] == "0.9"
