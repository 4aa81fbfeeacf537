"""TLS to the fleet's broker on a real amqps listener: a RabbitMQ node of this module's own whose
certificate a CA made for the test signs. A node joins, is given the broker's CA in its join answer and,
with that CA pinned, reaches its own queue over amqps as a real agent process configures its connection
(environment in, workers.celery_app out). The same agent pinning another CA, or dialling a name the
certificate does not carry, or pinning no CA at all (the system's CAs), is refused before it sends its
password; a plain amqp:// client at the amqps port is cut off at its protocol header. The real agent process,
started from the join answer as the install script starts it, heartbeats and consumes over TLS only. The
panel's own connection takes PANEL_BROKER_CA_FILE the same way."""

import json
import os
import subprocess
import sys
from urllib.parse import quote, urlsplit

import pytest
from kombu import Connection

from panel.run import wait_for_port
from tests.conftest import REPO
from tests.faults.broker import VHOST, BrokerNode, rabbitmq_missing
from tests.security.central_agent import central_agent_process, central_credential
from tests.security.test_fleet_transport import run_agent, wait_for
from tests.security.test_node_broker_user import join
from tests.tls_certs import make_authority, server_files
from workers.identity import inbox_kind, split_inbox_line
from workers.task_names import SSH_RUNNER_QUEUE
from workers.topology import HEARTBEAT_QUEUE, declare, panel_topology

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(180)]

# Run in a process of its own, as an agent or the panel is: Celery's broker settings are read once, from the
# environment. Arguments: the module holding the Celery app, the queue to read ("" for none).
CONNECT = """
import importlib, json, sys
app = importlib.import_module(sys.argv[1]).app
queue = sys.argv[2]
try:
    with app.connection_for_write() as connection:
        connection.ensure_connection(max_retries=0)
        channel = connection.channel()
        message = channel.basic_get(queue, no_ack=True) if queue else None
        body = message.body if message else None
        print(json.dumps({"connected": True, "message": body.decode() if isinstance(body, bytes) else body}))
except Exception as error:
    print(json.dumps({"connected": False, "error": f"{type(error).__name__}: {error}"}))
"""


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory):
    if missing := rabbitmq_missing():
        if os.environ.get("REQUIRE_RABBITMQ"):
            pytest.fail(missing)
        pytest.skip(missing)
    directory = tmp_path_factory.mktemp("tls-broker")
    authority = make_authority("ascend-panel test broker CA")
    files = server_files(authority, ["localhost"], directory / "tls")
    node = BrokerNode(directory / "rabbitmq", tls=files)
    with open(directory / "rabbitmq.log", "wb") as log:
        process = subprocess.Popen(node.argv, env={**os.environ, **node.env}, stdout=log, stderr=log)
    try:
        node.wait_ready()
        node.provision()
        with Connection(node.panel_url, connect_timeout=5) as connection:
            declare(connection, panel_topology())  # as the panel worker does when it starts
        wait_for_port(node.tls_port, timeout=30)
        node.ca_file = files.cafile
        yield node
    finally:
        process.kill()
        process.wait(30)


@pytest.fixture
def over_tls(settings, tls_broker):
    """The panel beside its broker (loopback, plain), agents sent to the amqps listener with its CA."""
    settings.CELERY_BROKER_URL = tls_broker.panel_url
    settings.PANEL_BROKER_ADMIN_URL = tls_broker.admin_url
    settings.PANEL_AGENT_BROKER_URL = f"amqps://localhost:{tls_broker.tls_port}/{VHOST}"
    settings.PANEL_BROKER_CA_FILE = str(tls_broker.ca_file)
    return settings


def connect(app_module: str, environment: dict, queue: str = "") -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CONNECT, app_module, queue],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), **environment},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def connect_as_agent(broker_url: str, ca_file=None, queue: str = "") -> dict:
    """Connect as an agent does; without `ca_file` it pins nothing (the system's CAs)."""
    environment = {"CELERY_BROKER_URL": broker_url}
    if ca_file:
        environment["ASCEND_PANEL_BROKER_CA_FILE"] = str(ca_file)
    return connect("workers.celery_app", environment, queue)


def publish_to_node(broker_url: str, node_name: str, body: str) -> None:
    from kombu import Exchange, Producer

    with Connection(broker_url, connect_timeout=5) as connection:
        Producer(connection.channel()).publish(
            body, exchange=Exchange("nodes", type="direct"), routing_key=f"node.{node_name}", declare=[]
        )


def test_a_joined_node_reaches_its_queue_over_tls_with_the_ca_its_join_answer_pinned(over_tls, tmp_path):
    answer = join("tls-node")
    assert answer["broker_url"].startswith("amqps://node.tls-node:")
    assert answer["broker_ca_pem"] == over_tls_ca(over_tls)
    pinned = tmp_path / "broker-ca.pem"  # where the install script writes it
    pinned.write_text(answer["broker_ca_pem"])

    publish_to_node(over_tls.CELERY_BROKER_URL, "tls-node", "over tls")
    reached = connect_as_agent(answer["broker_url"], pinned, queue="node.tls-node")
    assert reached == {"connected": True, "message": "over tls"}


def test_an_agent_pinning_another_ca_is_refused(over_tls, tmp_path):
    answer = join("tls-other-ca")
    impostor_ca = make_authority("someone else's CA").write(tmp_path / "other-ca.pem")

    refused = connect_as_agent(answer["broker_url"], impostor_ca, queue="node.tls-other-ca")
    assert refused["connected"] is False
    assert "CERTIFICATE_VERIFY_FAILED" in refused["error"], refused


def test_an_agent_dialling_a_name_the_certificate_does_not_carry_is_refused(over_tls, tmp_path, tls_broker):
    answer = join("tls-wrong-name")
    pinned = tmp_path / "broker-ca.pem"
    pinned.write_text(answer["broker_ca_pem"])
    by_address = answer["broker_url"].replace("@localhost:", "@127.0.0.1:")  # the certificate names localhost

    refused = connect_as_agent(by_address, pinned, queue="node.tls-wrong-name")
    assert refused["connected"] is False
    assert "CERTIFICATE_VERIFY_FAILED" in refused["error"], refused
    assert "127.0.0.1" in refused["error"]


def test_the_panels_own_connection_pins_its_ca_file(tls_broker, tmp_path):
    parts = urlsplit(tls_broker.panel_url)
    userinfo = f"{parts.username}:{quote(parts.password or '', safe='')}"
    environment = {
        "DJANGO_SETTINGS_MODULE": "panel.settings",
        "SECRET_KEY": "tls-test",
        "PANEL_MODE": "test",
        "CELERY_BROKER_URL": f"amqps://{userinfo}@localhost:{tls_broker.tls_port}/{VHOST}",
    }
    other_ca = make_authority("someone else's CA").write(tmp_path / "other-ca.pem")

    own = connect("panel.celery", {**environment, "PANEL_BROKER_CA_FILE": str(tls_broker.ca_file)})
    other = connect("panel.celery", {**environment, "PANEL_BROKER_CA_FILE": str(other_ca)})
    assert own == {"connected": True, "message": None}
    assert "CERTIFICATE_VERIFY_FAILED" in other["error"], other


def over_tls_ca(settings) -> str:
    with open(settings.PANEL_BROKER_CA_FILE, encoding="ascii") as handle:
        return handle.read()


def test_a_plain_amqp_client_dialling_the_tls_port_is_not_served(over_tls):
    answer = join("tls-plain")
    plain = answer["broker_url"].replace("amqps://", "amqp://", 1)

    refused = connect_as_agent(plain, queue="node.tls-plain")
    assert refused["connected"] is False
    assert "Connection reset by peer" in refused["error"], refused  # at the protocol header: no password sent


def test_an_agent_pinning_no_ca_trusts_only_the_systems_and_is_refused(over_tls):
    answer = join("tls-no-ca")

    refused = connect_as_agent(answer["broker_url"], queue="node.tls-no-ca")
    assert refused["connected"] is False
    assert "CERTIFICATE_VERIFY_FAILED" in refused["error"], refused


@pytest.fixture
def agent_over_tls(over_tls, sim_host, tmp_path):
    """The real agent (python -m workers.agent) as the install script starts it from the join answer: its
    node's broker URL (amqps://) and the CA the answer carried, pinned."""
    answer = join("tls-agent")
    pinned = tmp_path / "broker-ca.pem"
    pinned.write_text(answer["broker_ca_pem"])
    yield from run_agent(
        "tls-agent", answer, sim_host, tmp_path, {"ASCEND_PANEL_BROKER_CA_FILE": str(pinned)}
    )


def test_an_agent_process_configured_from_its_join_answer_works_over_tls_only(agent_over_tls, tls_broker):
    """Its heartbeats reach the heartbeat queue (published over amqps), its worker consumes its queue, and
    every connection its user holds is TLS on the amqps listener."""
    name, _, log_path = agent_over_tls
    heartbeat = wait_for(
        lambda: first_heartbeat(tls_broker.panel_url),
        f"a heartbeat over TLS (the agent's log: {log_path})",
    )
    assert heartbeat["node"] == name

    connections = wait_for(
        lambda: connections_consuming(tls_broker, f"node.{name}", f"node.{name}"),
        f"the agent consuming its queue (its log: {log_path})",
    )
    assert {(connection["ssl"], connection["port"]) for connection in connections} == {
        (True, tls_broker.tls_port)
    }


def test_the_central_agent_reaches_its_queue_over_tls_with_the_ca_its_credential_folder_holds(
    over_tls, tls_broker, tmp_path
):
    """`manage.py agent_credential --central --broker` writes the broker's CA beside the URL that needs it,
    and the central agent started from that folder (as docker-compose starts it) consumes ssh-runner over
    TLS."""
    credential = central_credential(tmp_path / "central")
    assert credential.broker_url.startswith("amqps://")
    assert (credential.folder / "broker-ca.pem").read_text() == over_tls_ca(over_tls)

    state = tmp_path / "central-state"
    with central_agent_process(credential, state) as log_path:
        connections = wait_for(
            lambda: connections_consuming(tls_broker, over_tls.PANEL_BROKER_CENTRAL_USER, SSH_RUNNER_QUEUE),
            f"the central agent consuming ssh-runner (its log: {log_path})",
        )
    assert {(connection["ssl"], connection["port"]) for connection in connections} == {
        (True, tls_broker.tls_port)
    }


def test_agent_credential_removes_a_ca_the_panel_no_longer_has(over_tls, tmp_path):
    """An agent left pinning the old CA would refuse a broker whose certificate a public CA now signs."""
    folder = tmp_path / "central"
    central_credential(folder)
    over_tls.PANEL_BROKER_CA_FILE = ""

    central_credential(folder)
    assert not (folder / "broker-ca.pem").exists()


def connections_consuming(broker: BrokerNode, user: str, queue: str) -> list[dict] | None:
    """`user`'s connections to `broker`, once `queue` has a consumer (None before)."""
    if not broker.api("GET", f"/api/queues/{VHOST}/{quote(queue, safe='')}").json().get("consumers"):
        return None
    return [
        connection
        for connection in broker.api("GET", "/api/connections").json()
        if connection["user"] == user
    ]


def first_heartbeat(panel_url: str) -> dict | None:
    """The first heartbeat waiting in the heartbeat queue (apart from the metrics: workers.topology), read
    with the panel's user as its ingester reads it."""
    with Connection(panel_url, connect_timeout=5) as connection:
        channel = connection.channel()
        while message := channel.basic_get(HEARTBEAT_QUEUE, no_ack=True):
            _signer, _seal, raw = split_inbox_line(message.body)
            if inbox_kind(raw) == "heartbeat":
                return json.loads(raw)["heartbeat"]
    return None
