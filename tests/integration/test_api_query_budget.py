"""List endpoints make the same number of queries for 3 rows and 30."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from panel.nodes.models import Node, Npu
from panel.operations.models import Operation
from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db


def make_nodes(start, count):
    for i in range(start, start + count):
        node = Node.objects.create(name=f"budget-{i}")
        Npu.objects.bulk_create([Npu(node=node, npu_id=n, logic_id=n) for n in range(8)])
        Operation.objects.create(kind="inventory", node=node, target=node.name)


def queries_for(client, url):
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


@pytest.mark.parametrize("url", ["/api/v1/nodes/", "/api/v1/operations/"])
def test_list_endpoints_keep_their_query_count_as_rows_grow(alice, url):
    client = api_client_for(alice)
    make_nodes(0, 3)
    queries_for(client, url)  # warm: the user's role is looked up once per request user
    few = queries_for(client, url)
    make_nodes(3, 27)
    assert queries_for(client, url) == few
