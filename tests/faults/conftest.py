"""Fault tier: one real stack (tests/faults/stack.py) for the whole session, shared by every scenario. It runs
the fleet setup on a RabbitMQ node of its own: absent rabbitmq-server, the tier is skipped with the reason
(a failure under REQUIRE_RABBITMQ=1, as CI sets it)."""

import os

import pytest

from tests.faults.broker import rabbitmq_missing
from tests.faults.scenarios import all_nodes
from tests.faults.stack import FaultStack


@pytest.fixture(scope="session")
def fault_stack():
    if missing := rabbitmq_missing():
        if os.environ.get("REQUIRE_RABBITMQ"):
            pytest.fail(missing)
        pytest.skip(missing)
    stack = FaultStack(all_nodes()).start()
    try:
        yield stack
    finally:
        stack.stop()
