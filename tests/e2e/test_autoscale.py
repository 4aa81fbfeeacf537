"""Autoscaling end to end: a deployment of sim engines that each run two sequences at once (`--max-num-seqs
2`), load driven through the /v1 gateway until requests queue on the engine, the reconcile tick's
autoscaler adding a replica (1 → 2) through the apply path on the real Celery worker and sim host, and
taking it away again once the load is gone (2 → 1, drained through the gateway first); each step a recorded
decision that ends done. No request fails."""

import threading

import pytest

import panel.deployments.tasks  # noqa: F401  registers the panel's probe ingest on the shared app
from tests.conftest import api_client_for
from tests.deployment_helpers import wait_for
from tests.e2e.test_gateway_disruptions import replicas_running, sim_spec
from tests.gateway_helpers import key_for, stream_chat

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(300),
    pytest.mark.usefixtures("own_ports", "fresh_gateway_state", "reconcile_loop"),
]

AUTOSCALE = {"min": 1, "max": 2, "target": {"waiting_per_replica": 1}, "up_after_s": 6, "down_after_s": 10}


class Load:
    """`clients` threads streaming chats one after another until stopped; each answer's status."""

    def __init__(self, gateway, key, clients: int):
        self.gateway, self.key = gateway, key
        self.results: list[int] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]

    def _run(self):
        while not self._stop.is_set():
            try:
                response, events = stream_chat(self.gateway, self.key, max_tokens=30)
                ok = response.status_code == 200 and bool(events) and events[-1] == "[DONE]"
                self.results.append(200 if ok else response.status_code or 599)
            except Exception:  # a broken connection is a failed request too
                self.results.append(0)

    def __enter__(self):
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for thread in self._threads:
            thread.join(60)


def decisions_of(name: str) -> list[tuple[str, str, dict]]:
    """The autoscaler's steps on `name`, oldest first (its revisions are recorded too, as `revision`)."""
    from panel.deployments.decision_models import Decision

    kinds = ("scale_up", "scale_down", "scale_refused")
    steps = Decision.objects.filter(deployment_name=name, kind__in=kinds)
    return [(d.kind, d.outcome, d.figures) for d in steps.order_by("time")]


def test_a_queue_on_the_engine_adds_a_replica_and_a_quiet_spell_takes_it_away(
    node_with_npus, tiny_model, bob, gateway, monkeypatch
):
    monkeypatch.setenv("SIM_ENGINE_START_DELAY", "0.3")
    monkeypatch.setenv("SIM_ENGINE_TOKEN_DELAY", "0.05")  # an answer of 30 tokens streams for 1.5 s
    model, folder = tiny_model
    client = api_client_for(bob)
    spec = sim_spec(model, folder, autoscale=AUTOSCALE)
    spec["engine"]["extra_flags"] = {"--max-num-seqs": 2}
    created = client.put("/api/v1/deployments/chat/", spec, format="json")
    assert created.status_code == 201, created.json()
    wait_for(lambda: replicas_running(client, "chat", 1), 60, "chat running")

    with Load(gateway, key_for(bob), clients=8) as load:  # 8 at once on 2 slots: about 6 wait
        wait_for(lambda: replicas_running(client, "chat", 2), 90, "the autoscaler's second replica")
        wait_for(lambda: len(load.results) >= 16, 60, "answers with two replicas")
    up = decisions_of("chat")[0]
    assert up[0] == "scale_up"
    assert (up[2]["from"], up[2]["to"], up[2]["target"]) == (1, 2, 1)
    assert up[2]["waiting_per_replica"] > 1
    wait_for(lambda: decisions_of("chat")[0][1] == "done", 30, "the scale-up settled")

    wait_for(lambda: replicas_running(client, "chat", 1), 90, "back to one replica once quiet")
    kinds = [(kind, figures["from"], figures["to"]) for kind, _outcome, figures in decisions_of("chat")]
    assert kinds == [("scale_up", 1, 2), ("scale_down", 2, 1)]
    wait_for(lambda: decisions_of("chat")[1][1] == "done", 30, "the scale-down settled")
    assert set(load.results) == {200}, [r for r in load.results if r != 200][:5]
    own = client.get("/api/v1/deployments/chat/?format=spec").json()
    assert (own["replicas"], own["autoscale"]) == (1, AUTOSCALE)
