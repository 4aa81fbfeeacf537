from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import APIException
from rest_framework.response import Response

from panel.core.api import PanelViewSet, ReadOnlyPanelViewSet
from panel.core.choices import DesiredState
from panel.core.idempotency import idempotent
from panel.core.schema import ErrorSerializer
from panel.deployments import metrics_history, services
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
)
from panel.deployments.filtersets import BenchmarkFilterSet, DeploymentFilterSet
from panel.deployments.models import Benchmark, Deployment
from panel.deployments.planning import DeploymentRequestSerializer, plan_request

MAX_LOG_LINES_PER_PAGE = 5000
# What stop / start / restart answer: the deployment as it now is, or why its state refuses the command.
ACCEPTED_OR_REFUSED = {202: DeploymentSerializer, 409: ErrorSerializer}


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


class DeploymentViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PanelViewSet):
    """Deployments: plan, create, stop, start, restart, delete; logs, metrics and benchmarks.
    The contract is written at the top of panel/deployments/services.py."""

    queryset = Deployment.objects.select_related("model").prefetch_related("nodes", "npus__node")
    serializer_class = DeploymentSerializer
    filterset_class = DeploymentFilterSet
    http_method_names = ["get", "post", "delete", "head", "options"]

    @extend_schema(request=DeploymentRequestSerializer, responses={201: CreatedDeploymentSerializer})
    @idempotent(creates=Deployment.objects.exclude(desired_state=DesiredState.DELETED))
    def create(self, request):
        planned = plan_request(request.data, user=request.user)
        deployment = services.create_deployment(planned, user=request.user)
        deployment.warnings = planned.warnings
        return Response(CreatedDeploymentSerializer(deployment).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=DeploymentRequestSerializer, responses={200: PlanReviewSerializer})
    @action(detail=False, methods=["post"])
    def plan(self, request):
        """Dry run for the wizard's review: the plan and the exact command and environment per node."""
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
        lines = list(deployment.log_lines.filter(seq__gt=after).order_by("seq")[:limit])
        return Response(
            {
                "deployment": deployment.name,
                "last_seq": deployment.log_seq,
                "results": DeploymentLogSerializer(lines, many=True).data,
            }
        )

    @extend_schema(responses={(200, "text/plain"): OpenApiTypes.STR}, filters=False)
    @action(detail=True, methods=["get"], url_path="logs.txt")
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
