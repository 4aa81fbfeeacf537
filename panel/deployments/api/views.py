from django.http import HttpResponse
from django.utils import timezone
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, PolymorphicProxySerializer, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.response import Response
from rest_framework.settings import api_settings

from panel.core.api import PanelViewSet, ReadOnlyPanelViewSet
from panel.core.choices import DesiredState
from panel.core.idempotency import idempotent
from panel.core.schema import ErrorSerializer
from panel.core.streams import WAIT_ATTRIBUTE, StreamsMixin
from panel.core.watch import WatchSpec
from panel.core.yaml_api import YAML_PARSERS, SpecJSONRenderer, SpecYAMLRenderer
from panel.deployments import metrics_history, services
from panel.deployments.api.apply import ApplyAnswerSerializer, SpecAnswerSerializer, answer_of, is_spec
from panel.deployments.api.serializers import (
    BenchmarkListSerializer,
    BenchmarkRequestSerializer,
    BenchmarkSerializer,
    CreatedDeploymentSerializer,
    DeletedDeploymentSerializer,
    DeploymentLogPageSerializer,
    DeploymentLogQuerySerializer,
    DeploymentLogSerializer,
    DeploymentMetricsHistorySerializer,
    DeploymentMetricsSerializer,
    DeploymentSerializer,
    PlanReviewSerializer,
    with_latest_operation,
)
from panel.deployments.api.waiting import DeploymentWaiter
from panel.deployments.apply import apply
from panel.deployments.filtersets import BenchmarkFilterSet, DeploymentFilterSet
from panel.deployments.models import Benchmark, Deployment
from panel.deployments.planning import plan_request
from panel.deployments.request import DeploymentRequestSerializer
from panel.deployments.spec import DeploymentSpecSerializer, parse_spec, spec_of
from panel.deployments.undo import undo
from panel.realtime.broadcast import DEPLOYMENTS, deployment_group

MAX_LOG_LINES_PER_PAGE = 5000
# What stop / start / restart answer: the deployment as it now is, or why its state refuses the command.
ACCEPTED_OR_REFUSED = {202: DeploymentSerializer, 409: ErrorSerializer}


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


def _flag(value: str | None, name: str) -> bool:
    if value in (None, "", "false", "0"):
        return False
    if value in ("true", "1"):
        return True
    raise ValidationError({name: [_("Give true or false.")]})


class DeploymentViewSet(StreamsMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, PanelViewSet):
    """Deployments: plan, create, stop, start, restart, delete; logs, metrics and benchmarks.
    The contract is written at the top of panel/deployments/services.py; waiting and watching
    (`?wait=`, `?watch=true`) in docs/api-streams.md."""

    queryset = with_latest_operation(
        Deployment.objects.select_related("model", "replica_of").prefetch_related(
            "nodes", "npus__node", "replicas", "rollouts"
        )
    )
    serializer_class = DeploymentSerializer
    filterset_class = DeploymentFilterSet
    http_method_names = ["get", "post", "put", "delete", "head", "options"]
    parser_classes = [*api_settings.DEFAULT_PARSER_CLASSES, *YAML_PARSERS]

    # "update" is PUT apply: waitable as soon as the action exists.
    wait_actions = frozenset({"create", "update", "start", "stop", "restart", "destroy", "rollback"})
    waiter = DeploymentWaiter()
    watch = WatchSpec(
        event="deployment",
        key="name",
        list_group=DEPLOYMENTS,
        detail_group=lambda deployment: deployment_group(deployment.name),
        change_type="deployment.status",
        change_field="name",
        # Probes save these every few seconds; live metrics are the websocket's (engine.metrics).
        volatile=("metrics", "metrics_at", "updated"),
    )

    def get_renderers(self):
        # `?format=spec` belongs to the detail GET only; elsewhere a format would be one more knob to refuse.
        renderers = super().get_renderers()
        if getattr(self, "action", None) == "retrieve":
            renderers += [SpecJSONRenderer(), SpecYAMLRenderer()]
        return renderers

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "format",
                str,
                enum=["spec"],
                required=False,
                description="`spec`: the deployment as a spec that PUT accepts (YAML with "
                "`Accept: application/yaml`).",
            )
        ],
        responses={
            200: PolymorphicProxySerializer(
                component_name="DeploymentOrSpec",
                serializers=[DeploymentSerializer, SpecAnswerSerializer],
                resource_type_field_name=None,
            )
        },
    )
    def retrieve(self, request, pk=None):
        deployment = self.get_object()
        if request.accepted_renderer.format == "spec":
            return Response(spec_of(deployment))
        return Response(DeploymentSerializer(deployment).data)

    @extend_schema(
        operation_id="deployments_apply",
        request={
            "application/json": DeploymentSpecSerializer,
            "application/yaml": DeploymentSpecSerializer,
        },
        parameters=[
            OpenApiParameter("dry_run", bool, required=False, description="Plan and compare; change nothing.")
        ],
        responses={
            201: ApplyAnswerSerializer,
            200: ApplyAnswerSerializer,
            202: ApplyAnswerSerializer,
            409: ErrorSerializer,
        },
        description="Make the deployment called {id} (its name) look like the spec: 201 created, 200 "
        "unchanged, 202 changed (with each changed field and the effect: restart, move_npus, start, stop, "
        "scale, rolling; a rolling update answers its rollout). "
        "docs/deployment-spec.md describes the spec.",
    )
    @idempotent(creates=Deployment.objects.exclude(desired_state=DesiredState.DELETED))
    def update(self, request, pk=None):
        dry_run = _flag(request.query_params.get("dry_run"), "dry_run")
        spec = parse_spec(request.data, pk)
        try:
            outcome = apply(pk, spec, request.user, dry_run=dry_run)
        except services.DeploymentConflict as error:
            raise Conflict(str(error)) from None
        if outcome.result == "waiting":
            # Nothing to wait for here yet: the caller waits for the inspection, then applies again.
            setattr(request._request, WAIT_ATTRIBUTE, None)
        codes = {"created": status.HTTP_201_CREATED, "unchanged": status.HTTP_200_OK}
        return Response(
            answer_of(outcome, dry_run), status=codes.get(outcome.result, status.HTTP_202_ACCEPTED)
        )

    @extend_schema(
        request=None,
        parameters=[
            OpenApiParameter("dry_run", bool, required=False, description="Plan and compare; change nothing.")
        ],
        responses={200: ApplyAnswerSerializer, 202: ApplyAnswerSerializer, 409: ErrorSerializer},
        description="Roll back: apply again the spec the deployment had before the last apply that changed "
        "it (as `kubectl rollout undo`; rolling back twice returns). Answers as apply does: 202 changed with "
        "the changes and their effect, 200 unchanged; 400 `previous_spec` when nothing was applied since it "
        "was made.",
    )
    @action(detail=True, methods=["post"])
    @idempotent
    def rollback(self, request, pk=None):
        dry_run = _flag(request.query_params.get("dry_run"), "dry_run")
        try:
            outcome = undo(self.get_object(), request.user, dry_run=dry_run)
        except services.DeploymentConflict as error:
            raise Conflict(str(error)) from None
        code = status.HTTP_200_OK if outcome.result == "unchanged" else status.HTTP_202_ACCEPTED
        return Response(answer_of(outcome, dry_run), status=code)

    @extend_schema(request=DeploymentRequestSerializer, responses={201: CreatedDeploymentSerializer})
    @idempotent(creates=Deployment.objects.exclude(desired_state=DesiredState.DELETED))
    def create(self, request):
        planned = plan_request(request.data, user=request.user)
        deployment = services.create_deployment(planned, user=request.user)
        deployment.warnings = planned.warnings
        return Response(CreatedDeploymentSerializer(deployment).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=PolymorphicProxySerializer(
            component_name="PlanRequest",
            serializers=[DeploymentRequestSerializer, DeploymentSpecSerializer],
            resource_type_field_name=None,
        ),
        responses={200: PlanReviewSerializer},
        description="The plan (fits, chip, plan, memory_per_npu, warnings) and per node its argv and env; "
        "for a spec body also result, effect and changes as apply would answer.",
    )
    @action(detail=False, methods=["post"])
    def plan(self, request):
        """Dry run for the wizard's review: the plan and the exact command and environment per node. A spec
        body (as PUT takes, with its name) answers the review plus what applying it would change."""
        if is_spec(request.data):
            name = str(request.data.get("name") or "")
            if not name:
                raise ValidationError({"name": [_("Name the deployment the spec is for.")]})
            outcome = apply(name, parse_spec(request.data, name), request.user, dry_run=True)
            answer = answer_of(outcome, True)
            return Response({**(answer["plan"] or {}), **answer})
        return Response(plan_request(request.data, user=request.user).as_review())

    def _command(self, request, command):
        try:
            deployment = command(self.get_object(), user=request.user)
        except services.DeploymentConflict as error:
            raise Conflict(str(error)) from None
        deployment = Deployment.objects.filter(pk=deployment.pk).first() or deployment
        return Response(DeploymentSerializer(deployment).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses=ACCEPTED_OR_REFUSED)
    @action(detail=True, methods=["post"])
    def stop(self, request, pk=None):
        return self._command(request, services.stop)

    @extend_schema(request=None, responses=ACCEPTED_OR_REFUSED)
    @action(detail=True, methods=["post"])
    def start(self, request, pk=None):
        return self._command(request, services.start)

    @extend_schema(request=None, responses=ACCEPTED_OR_REFUSED)
    @action(detail=True, methods=["post"])
    def restart(self, request, pk=None):
        return self._command(request, services.restart)

    @extend_schema(responses={202: DeletedDeploymentSerializer})
    def destroy(self, request, pk=None):
        deployment = services.delete(self.get_object(), user=request.user)
        gone = not Deployment.objects.filter(pk=deployment.pk).exists()
        return Response({"deleted": gone, "name": deployment.name}, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        parameters=[DeploymentLogQuerySerializer], responses=DeploymentLogPageSerializer, filters=False
    )
    @action(detail=True, methods=["get"])
    def logs(self, request, pk=None):
        deployment = self.get_object()
        query = DeploymentLogQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        after = query.validated_data["after_seq"]
        limit = min(query.validated_data.get("limit", MAX_LOG_LINES_PER_PAGE), MAX_LOG_LINES_PER_PAGE)
        lines = deployment.log_lines.filter(seq__gt=after)
        if not query.validated_data["probes"]:
            lines = lines.without_probes()
        lines = list(lines.order_by("seq")[:limit])
        return Response(
            {
                "deployment": deployment.name,
                "last_seq": deployment.log_seq,
                "results": DeploymentLogSerializer(lines, many=True).data,
            }
        )

    # Routed in panel/urls.py as `<id>/logs.txt`, a file name without the trailing slash a router would add.
    @extend_schema(responses={(200, "text/plain"): OpenApiTypes.STR}, filters=False)
    def logs_txt(self, request, pk=None):
        deployment = self.get_object()
        text = "".join(
            f"{time.isoformat()} {node} {line}\n"
            for time, node, line in deployment.log_lines.order_by("seq").values_list("time", "node", "line")
        )
        response = HttpResponse(text, content_type="text/plain; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{deployment.name}.log"'
        return response

    @extend_schema(responses=DeploymentMetricsSerializer, filters=False)
    @action(detail=True, methods=["get"])
    def metrics(self, request, pk=None):
        deployment = self.get_object()
        return Response(
            {"deployment": deployment.name, "metrics": deployment.metrics, "time": deployment.metrics_at}
        )

    @extend_schema(responses=DeploymentMetricsHistorySerializer, filters=False)
    @action(detail=True, methods=["get"], url_path="metrics/history")
    def metrics_history(self, request, pk=None):
        """The engine's figures over the last hour, as the deployment page charts them."""
        deployment = self.get_object()
        points = metrics_history.read(deployment.name, timezone.now())
        return Response({"deployment": deployment.name, "points": points})

    @extend_schema(methods=["GET"], responses=BenchmarkListSerializer, filters=False)
    @extend_schema(
        methods=["POST"],
        request=BenchmarkRequestSerializer,
        responses={202: BenchmarkSerializer, 409: ErrorSerializer},
    )
    @action(detail=True, methods=["get", "post"])
    def benchmarks(self, request, pk=None):
        deployment = self.get_object()
        if request.method == "GET":
            runs = Benchmark.objects.filter(deployment=deployment)
            return Response({"results": BenchmarkSerializer(runs, many=True).data})
        params = BenchmarkRequestSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        try:
            benchmark = services.start_benchmark(deployment, dict(params.validated_data), user=request.user)
        except services.DeploymentConflict as error:
            raise Conflict(str(error)) from None
        return Response(BenchmarkSerializer(benchmark).data, status=status.HTTP_202_ACCEPTED)


class BenchmarkViewSet(ReadOnlyPanelViewSet):
    """Every benchmark run, comparable across deployments (each keeps a copy of its engine settings)."""

    queryset = Benchmark.objects.all()
    serializer_class = BenchmarkSerializer
    filterset_class = BenchmarkFilterSet
