"""Attacks with the central agent's credential, as whoever owns its host holds it: the key `manage.py
agent_credential --central` wrote and its own broker user. It commands the SSH nodes and nothing else: it
cannot make the panel run its own tasks, make an agent node run anything or speak for one, open the
gateway's Redis seal or a secret at rest, derive any of the panel's keys, or reach past ssh-runner and the
ingest exchange on the broker."""

import asyncio
import hashlib
import hmac
import uuid

import amqp
import orjson
import pytest
from celery import Celery

from panel.core.infra import panel_tasks, refusals
from panel.core.infra.refusals import rejected_by_reason
from panel.gateway import sealing, store
from panel.gateway.access import identity
from tests.integration.conftest import event_batch
from tests.node_trust import operation_on
from tests.security.central_agent import central_credential
from tests.security.test_fleet_transport import agent_process, wait_for
from tests.security.test_node_broker_user import channel_of
from tests.security.test_panel_state_gateway import forged_pool
from tests.security.test_panel_tasks_signed import as_a_node
from workers.celery_app import app
from workers.contracts import Heartbeat, utcnow
from workers.identity import (
    AUTH_KWARG,
    CENTRAL,
    derive,
    envelope_parts,
    new_stamp,
    signature,
    task_auth,
)
from workers.sealing import SecretUnreadable, open_for_node, unseal
from workers.task_names import AGENT_INVENTORY, HEARTBEAT, INGEST_EVENTS, PANEL_QUEUE, SSH_RUNNER_QUEUE
from workers.topology import agent_queue, ingest_queue, route

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


@pytest.fixture
def stolen(tmp_path):
    """The central agent's credential, as its host holds it."""
    return central_credential(tmp_path / "central")


@pytest.fixture
def agent_node(rabbit, sim_host, tmp_path):
    """A real agent process for a joined agent node (its own key and broker user only)."""
    yield from agent_process(rabbit, sim_host, tmp_path, "sim-c")


def refused(kind: str, reason: str) -> int:
    return rejected_by_reason().get((kind, reason), 0)


def as_the_central_agent(stolen, task_name: str, *args, **options) -> None:
    """Publish through the ingest exchange with the central agent's own broker user. The test process is
    the panel too, whose publish hook would sign a panel task's name with the panel's key: not here."""
    attacker = Celery("attacker", broker=stolen.broker_url)
    attacker.conf.broker_transport_options = {"socket_connect_timeout": 3}
    with as_a_node():
        attacker.send_task(task_name, args=list(args), **options, **route(ingest_queue(agent=True)))


def sealed_as(key: bytes, signer: str, task_name: str, node: str, body: dict) -> dict:
    """An agent's envelope (workers.identity.seal_for_panel) signed with `key`, whoever it claims to be."""
    stamp = new_stamp(10)
    sig = signature(key, *envelope_parts(stamp, task_name, node, body))
    return {"node": node, "signer": signer, "body": body, "stamp": stamp, "sig": sig}


@pytest.mark.attack("broker-reach")
@pytest.mark.reaches_other_node
def test_the_central_agents_broker_user_reads_only_ssh_runner_and_writes_only_ingest(rabbit, stolen):
    from panel.nodes.agents.broker_admin import agent_permissions

    user = f"central-{rabbit.suffix}"
    assert stolen.broker_url.startswith(f"amqp://{user}:")
    permissions = rabbit.api("GET", f"/api/permissions/{rabbit.vhost}/{user}").json()
    assert {k: permissions[k] for k in ("configure", "write", "read")} == agent_permissions(SSH_RUNNER_QUEUE)
    for exchange, routing_key in (("panel", "panel"), ("nodes", "node.anyone"), ("", "panel")):
        connection, channel = channel_of(stolen.broker_url)
        with connection:
            channel.confirm_select()
            with pytest.raises(amqp.exceptions.AccessRefused):
                channel.basic_publish_confirm(amqp.Message(b"{}"), exchange=exchange, routing_key=routing_key)
    connection, channel = channel_of(stolen.broker_url)
    with connection, pytest.raises(amqp.exceptions.AccessRefused):
        channel.basic_get("panel")


def forged_prune(stolen) -> tuple[str, dict, int]:
    """(task id, kwargs, id of an audit entry pruning would delete): `panel.audit.prune` signed with the
    central key as if it were the panel-task key."""
    from panel.audit.models import AuditEntry

    entry = AuditEntry.objects.create(action="node.added", target="kept")
    AuditEntry.objects.filter(pk=entry.pk).update(time="2000-01-01T00:00:00Z")
    task_id = str(uuid.uuid4())
    stamp = new_stamp(60)
    sig = signature(stolen.key, *panel_tasks._parts(stamp, "panel.audit.prune", task_id, [], {}))
    return task_id, {AUTH_KWARG: {"stamp": stamp, "sig": sig}}, entry.pk


@pytest.mark.attack("impersonation")
@pytest.mark.attacks_panel
def test_a_panel_task_signed_with_the_central_key_runs_nothing(stolen, panel_worker):
    from panel.audit.models import AuditEntry

    task_id, forged, entry = forged_prune(stolen)
    ingest_refusals = refusals.rejected_counts().get("ingest-task", 0)

    # Through the one exchange its broker user may write to: the ingest guard refuses a panel task's name.
    as_the_central_agent(stolen, "panel.audit.prune", kwargs=forged, task_id=task_id)

    wait_for(
        lambda: refusals.rejected_counts().get("ingest-task", 0) > ingest_refusals,
        "the ingest guard's refusal",
    )
    assert AuditEntry.objects.filter(pk=entry).exists()


@pytest.mark.attacks_panel
def test_the_panel_task_check_refuses_the_central_keys_signature_on_the_panels_own_queue(
    stolen, panel_worker
):
    """Not an attack (bench/attacks.py counts it apart): the central agent's broker user cannot publish to
    the panel's queue, so this uses the panel's own user, to show the panel task's own check would refuse
    the signature had the broker let it through."""
    from panel.audit.models import AuditEntry

    task_id, forged, entry = forged_prune(stolen)
    signature_before = refused("panel_task", "signature")

    with as_a_node():
        app.send_task("panel.audit.prune", kwargs=forged, task_id=task_id, queue=PANEL_QUEUE)

    wait_for(lambda: refused("panel_task", "signature") > signature_before, "the panel task's refusal")
    assert AuditEntry.objects.filter(pk=entry).exists()


@pytest.mark.reaches_other_node
def test_an_agent_node_runs_no_task_signed_with_the_central_key(
    stolen,
    panel_worker,  # (the agent's heartbeat says it is up)
    agent_node,
    tmp_path,
):
    from panel.nodes.models import Node

    name, _answer, log_path = agent_node
    wait_for(
        lambda: Node.objects.filter(name=name, last_heartbeat__isnull=False).exists(),
        f"the agent's heartbeat ({log_path.read_text()[-2000:]})",
    )
    target = {
        "node": name,
        "address": "127.0.0.1",
        "username": "root",
        "sealed_secret": "",
        "host_key_fingerprint": "",
    }
    forgeries = [
        (
            CENTRAL,
            {"operation_id": str(uuid.uuid4()), "start_seq": 0, "target": target},
        ),  # as the central agent
        (name, {"operation_id": str(uuid.uuid4()), "start_seq": 0}),  # as the node itself
    ]
    for signer, kwargs in forgeries:
        task_id = str(uuid.uuid4())
        kwargs[AUTH_KWARG] = task_auth(stolen.key, signer, AGENT_INVENTORY, task_id, name, kwargs)
        # The central agent's user may not publish to the nodes exchange (above): sent as if it could.
        app.send_task(AGENT_INVENTORY, kwargs=kwargs, task_id=task_id, **route(agent_queue(f"node.{name}")))

    def both_refused():
        log = log_path.read_text()
        return "refused task agent.inventory" in log and log.count("refused task agent.inventory") == 2

    wait_for(both_refused, f"the agent to refuse both ({log_path.read_text()[-2000:]})")
    log = log_path.read_text()
    assert "(sender)" in log
    assert "(signature)" in log
    for _signer, kwargs in forgeries:  # neither took the operation's lease (workers.leases): nothing ran
        assert not (tmp_path / "state" / "operations" / f"{kwargs['operation_id']}.json").exists()


@pytest.mark.attack("impersonation")
@pytest.mark.reaches_other_node
@pytest.mark.usefixtures("_wired_to_redis")
def test_the_central_key_speaks_for_no_agent_node(stolen, panel_worker):
    from panel.nodes.models import Node

    node = Node.objects.create(name="agent-run", transport="agent")
    operation = operation_on(node)
    beat = Heartbeat(node=node.name, time=utcnow(), agent_version="1", interval_s=5).model_dump(mode="json")
    batch = event_batch(operation, (1, "state", {"state": "succeeded", "result": {"facts": {"x": 1}}}))
    before = {
        (kind, reason): refused(kind, reason)
        for kind in ("heartbeat", "event_batch")
        for reason in ("sender", "signature")
    }
    for signer in (CENTRAL, node.name):  # as the central agent, and as the node itself
        as_the_central_agent(stolen, HEARTBEAT, sealed_as(stolen.key, signer, HEARTBEAT, node.name, beat))
        as_the_central_agent(
            stolen, INGEST_EVENTS, sealed_as(stolen.key, signer, INGEST_EVENTS, node.name, batch)
        )

    wait_for(
        lambda: all(refused(kind, reason) > count for (kind, reason), count in before.items()),
        "the panel to refuse all four",
    )
    node.refresh_from_db()
    operation.refresh_from_db()
    assert node.last_heartbeat is None
    assert operation.status != "succeeded"
    assert not operation.events.exists()


@pytest.mark.attack("stolen-key")
@pytest.mark.attacks_panel
@pytest.mark.usefixtures("_wired_to_redis")
def test_the_central_key_opens_neither_the_gateways_redis_seal_nor_a_secret_at_rest(stolen, bob):
    from panel.accounts.models import ApiToken
    from panel.core.infra.secrets import encrypt
    from panel.nodes.agents.ssh import sealed_credentials

    _token, raw = ApiToken.issue(bob, "app", scopes=["inference"])
    pool_key = identity.pool_key("chat")
    body = orjson.dumps({"v": forged_pool("chat")})
    as_material = hmac.new(stolen.key, b"ascend-panel gateway redis entries", hashlib.sha256).digest()
    for key in (stolen.key, as_material):  # the central key as the seal's key, and as its key material
        mac = hmac.new(key, pool_key.encode() + b"\0" + body, hashlib.sha256).hexdigest()[: sealing.MAC_HEX]
        before = refusals.state_counts(store.client()).get("gateway-pool", 0)
        store.client().set(pool_key, f"{mac}.{body.decode()}", ex=60)
        assert asyncio.run(identity.resolve_cached(raw, "chat")).pool is None
        assert refusals.state_counts(store.client()).get("gateway-pool", 0) == before + 1

    at_rest = [sealed_credentials(password="ssh-pa55"), encrypt("ek_engine-key")]
    for sealed in at_rest:
        with pytest.raises(SecretUnreadable):
            open_for_node(stolen.key, sealed)
        with pytest.raises(SecretUnreadable):
            unseal(stolen.key.decode(), sealed)


@pytest.mark.attack("stolen-key")
@pytest.mark.attacks_panel
def test_none_of_the_panels_keys_derives_from_the_central_key(stolen):
    from panel.core.infra.secrets import key_material
    from panel.nodes.agents.trust import agent_key
    from panel.nodes.models import Node

    node = Node.objects.create(name="agent-derived", transport="agent")
    material = stolen.key.decode()  # the best guess: take the central key for the panel's material
    guesses = {
        "node": derive(material, f"ascend-panel agent {node.name} {node.credential_id}").hex().encode(),
        "panel task": derive(material, panel_tasks.PURPOSE),
    }
    assert guesses["node"] != agent_key(node)
    assert guesses["panel task"] != panel_tasks._key(key_material())
    assert stolen.key not in (key_material().encode(), agent_key(node), panel_tasks._key(key_material()))
