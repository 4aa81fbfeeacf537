"""Fault tier: one real stack (tests/faults/stack.py) for the whole session, shared by every scenario."""

import pytest

from tests.faults.scenarios import all_nodes
from tests.faults.stack import FaultStack


@pytest.fixture(scope="session")
def fault_stack():
    stack = FaultStack(all_nodes()).start()
    try:
        yield stack
    finally:
        stack.stop()
