"""Fuzz every REST operation of the panel's own OpenAPI schema against a live panel (the ASGI server, as
`make run` serves it), as an admin and as a viewer: no input, however hostile, gets a 500, and every answer
matches what the schema promises (status codes, content types, bodies).

Runs as its own tier, `make test-contract` (part of `make test-all`, hence CI): SCHEMA_FUZZ_EXAMPLES cases
per operation and role (5 unless set), derandomized so a run is repeatable."""

import json
import os

import pytest
import schemathesis
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from panel.accounts.models import ApiToken
from panel.catalog.models import Model, ModelArtifact
from panel.core.domain.choices import DeploymentState
from panel.deployments.models import Benchmark, Deployment
from panel.monitoring.models import Alert
from panel.nodes.models import Node, Npu
from panel.operations.models import Operation
from panel.run import free_port

EXAMPLES = int(os.environ.get("SCHEMA_FUZZ_EXAMPLES", "5"))


def _panel_openapi() -> dict:
    """The document /api/schema/ serves (and /api/docs/ shows), built by the same generator in-process:
    the endpoint wants a signed-in user, and collection happens before any test database exists."""
    document = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(OpenApiJsonRenderer().render(document))


schema = schemathesis.openapi.from_dict(_panel_openapi())
# Examples and fuzzing, SCHEMA_FUZZ_EXAMPLES cases each: the coverage phase (every boundary of every rule, no
# bound on how many) took tens of requests per operation, the tier most of an hour.
schema.config.phases.update(phases=["examples", "fuzzing"])


def no_undocumented_server_error(ctx, response, case):
    """Schemathesis' not_a_server_error, but a 5xx the operation documents is an answer, not a crash: the
    playground's 502 when the deployment's engine does not answer (the fuzz world runs none), the 503 of an
    Idempotency-Key while Redis is down. A 500 is documented nowhere, so it always fails."""
    documented = case.operation.definition.raw.get("responses", {})
    if response.status_code != 500 and str(response.status_code) in documented:
        return None
    return not_a_server_error(ctx, response, case)


CHECKS = [
    no_undocumented_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]

# Path parameters of rows the `world_to_fuzz` fixture creates, by path prefix: each row by id and, where
# it has one, by name. Random values almost never hit a row, so most generated cases are pointed at a real
# one: that is where the actions run.
SEEDED = {}


@schema.hook
def flatmap_path_parameters(context, path_parameters):
    if not path_parameters:
        return st.just(path_parameters)
    path = context.operation.path
    real = next((refs for prefix, refs in SEEDED.items() if path.startswith(prefix)), {})
    pointed = [
        {
            key: real[key][index % len(real[key])] if key in real else value
            for key, value in path_parameters.items()
        }
        for index in range(max((len(refs) for refs in real.values()), default=0))
    ]
    return st.sampled_from([path_parameters, *pointed])


@schema.hook
def map_query(context, query):
    """A watch streams until the client leaves, and a wait lasts up to its timeout (300 s when not given):
    either would hold the fuzz that long. Watches are checked by their own tests (test_wait_and_watch.py,
    test_watch_resume.py); here a watch is asked as false and a wait lasts a second at most. Every other
    value goes as generated, invalid ones included."""
    if not query:
        return query
    if query.get("watch") in (True, "true", "True", "1", 1):
        query["watch"] = "false"
    if "wait" in query:
        timeout = query.get("timeout")
        number = isinstance(timeout, int | float) and not isinstance(timeout, bool)
        if timeout is None or (number and timeout > 1):
            query["timeout"] = 1
    return query


@pytest.fixture
def world_to_fuzz(alice, charlie, _wired_to_redis):
    """API tokens by role and one row of each kind for detail and action endpoints to find. Creating
    operations needs no worker: their message just waits in the test Redis."""
    node = Node.objects.create(name="fuzz-node")
    Npu.objects.bulk_create([Npu(node=node, npu_id=n, logic_id=n) for n in range(2)])
    operation = Operation.objects.create(kind="inventory", node=node, target=node.name)
    now = timezone.now()
    alert = Alert.objects.create(
        node=node, key="npu_health:0:0", kind="npu_health", severity="critical", message="fuzz",
        first_seen=now, last_seen=now,
    )  # fmt: skip
    model = Model.objects.create(name="fuzz-model.v1")  # a name with a dot, as models often have
    artifact = ModelArtifact.objects.create(model=model, node=node, path="/models/fuzz-model")
    # A port nothing listens on: the playground's calls get the documented 502, never another test's engine.
    port = free_port()
    deployment = Deployment.objects.create(
        name="fuzz-deployment", model=model, artifact=artifact, observed_state=DeploymentState.RUNNING,
        spec={"port": port, "served_model_name": "fuzz", "parts": [{"node": node.name, "role": "single"}]},
        runtime={"findings": [{"code": "fuzz", "message": "fuzz"}], "log_tail": ["a line"]},
    )  # fmt: skip
    deployment.nodes.add(node)
    deployment.npus.set(node.npus.all())
    benchmark = Benchmark.objects.create(deployment=deployment, deployment_name=deployment.name)
    spare_token, _ = ApiToken.issue(alice, "spare")  # DELETE /tokens/{id}/ revokes this one, not ours
    tokens = {"admin": ApiToken.issue(alice, "fuzz")[1], "viewer": ApiToken.issue(charlie, "fuzz")[1]}
    SEEDED.update(
        {
            "/api/v1/nodes/": {"id": [node.pk, node.name]},
            "/api/v1/node-stacks/": {"name": [node.name, str(node.pk)]},
            "/api/v1/operations/": {"id": [str(operation.pk)]},
            "/api/v1/alerts/": {"id": [alert.pk]},
            "/api/v1/models/": {"id": [model.pk, model.name]},
            "/api/v1/model-artifacts/": {"id": [artifact.pk]},
            "/api/v1/tokens/": {"id": [spare_token.pk, spare_token.name]},
            "/api/v1/deployments/": {"id": [deployment.pk, deployment.name]},
            "/api/v1/benchmarks/": {"id": [benchmark.pk]},
        }
    )
    yield tokens
    SEEDED.clear()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("role", ["admin", "viewer"])
@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    # No shrinking: each failure already comes with a curl line that reproduces it, and shrinking would
    # take most of the time budget.
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_api_operation_answers_without_server_errors_and_as_documented(
    case,
    role,
    world_to_fuzz,
    live_web,
):
    case.call_and_validate(
        base_url=live_web.url,
        headers={"Authorization": f"Bearer {world_to_fuzz[role]}"},
        checks=CHECKS,
        timeout=30,
    )
