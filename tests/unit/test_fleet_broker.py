"""The fleet broker's settings that need no broker: TLS options, the lossy metrics queue, what agents may
declare, and the URL a node gets."""

import ssl

from panel.nodes.agents.broker_admin import node_broker_url, node_permissions
from workers import metrics_inbox
from workers.celery_app import ssl_options
from workers.topology import agent_queue, ingest_queue, metrics_queue, route, vhost_of


def test_amqps_verifies_the_broker_against_the_pinned_ca_and_the_host_dialled():
    options = ssl_options("amqps://node.a:pw@panel.example:5671/ascend", "/etc/ascend-panel/broker-ca.pem")
    assert options == {
        "cert_reqs": ssl.CERT_REQUIRED,
        "server_hostname": "panel.example",
        "ca_certs": "/etc/ascend-panel/broker-ca.pem",
    }


def test_amqps_without_a_pinned_ca_still_requires_a_certificate_the_system_trusts():
    options = ssl_options("amqps://panel.example/ascend", None)
    assert options == {"cert_reqs": ssl.CERT_REQUIRED, "server_hostname": "panel.example"}


def test_plain_amqp_and_redis_use_no_tls_options():
    assert ssl_options("amqp://panel.example/ascend", "/ca.pem") is None
    assert ssl_options("redis://127.0.0.1:6379/0", "/ca.pem") is None


def test_the_metrics_queue_drops_the_oldest_and_expires_what_the_panel_would_skip():
    arguments = metrics_queue().queue_arguments
    assert arguments["x-max-length"] == metrics_inbox.MAX_BACKLOG
    assert arguments["x-overflow"] == "drop-head"
    assert arguments["x-message-ttl"] == metrics_inbox.MAX_AGE_S * 1000


def test_agents_name_the_panels_entities_without_declaring_them():
    for queue in (agent_queue("node.a", agent=True), ingest_queue(agent=True)):
        assert queue.no_declare
        assert queue.exchange.no_declare
    assert not ingest_queue().no_declare  # the panel declares


def test_a_send_goes_through_the_queues_exchange_never_the_default_one():
    assert route(agent_queue("node.a")) | {"queue": None} == {
        "queue": None,
        "exchange": "nodes",
        "routing_key": "node.a",
    }
    assert route(ingest_queue())["exchange"] == "ingest"


def test_the_vhost_is_read_as_kombu_reads_it():
    assert vhost_of("amqp://u:p@h:5672/ascend") == "ascend"
    assert vhost_of("amqp://u:p@h:5672/") == "/"
    assert vhost_of("amqp://u:p@h:5672/%2Fprod") == "/prod"


def test_a_node_gets_its_own_user_in_the_public_address():
    url = node_broker_url("amqps://panel.example:5671/ascend", "npu-01", "p/w+")
    assert url == "amqps://node.npu-01:p%2Fw%2B@panel.example:5671/ascend"


def test_a_node_may_configure_nothing_write_ingest_and_read_its_own_queue():
    assert node_permissions("a.b") == {"configure": "^$", "write": "^ingest$", "read": "^node\\.a\\.b$"}
