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

from panel.core.domain.choices import DesiredState
from panel.core.rest.api import PanelViewSet, ReadOnlyPanelViewSet
from panel.core.rest.idempotency import idempotent
from panel.core.rest.schema import ErrorSerializer
from panel.core.rest.streams import WAIT_ATTRIBUTE, StreamsMixin
from panel.core.rest.watch import WatchSpec
from panel.core.rest.yaml_api import YAML_PARSERS, SpecJSONRenderer, SpecYAMLRenderer
from panel.deployments import commands, metrics_history, services
from panel.deployments.api import sleep as sleep_api
from panel.deployments.api.apply import (
    ApplyAnswerSerializer,
    ScaleRequestSerializer,
    SpecAnswerSerializer,
    answer_of,
    is_spec,
)
from panel.deployments.api.events import EventPageSerializer, EventQuerySerializer, events_page
from panel.deployments.api.revisions import RevisionListSerializer
from panel.deployments.api.serializers import (
    BenchmarkListSerializer,
    BenchmarkRequestSerializer,
    BenchmarkSerializer,
    CreatedDeploymentSerializer,
    DeletedDeploymentSerializer,
    DeploymentCreateSerializer,
    DeploymentLogPageSerializer,
    DeploymentLogQuerySerializer,
    DeploymentLogSerializer,
    DeploymentMetricsHistorySerializer,
    DeploymentMetricsSerializer,
    DeploymentSerializer,
    PlanReviewSerializer,
    RoutingChoiceSerializer,
    with_latest_operation,
)
from panel.deployments.api.waiting import DeploymentWaiter
from panel.deployments.filtersets import BenchmarkFilterSet, DeploymentFilterSet
from panel.deployments.models import Benchmark, Deployment
from panel.deployments.placement.planning import plan_request
from panel.deployments.revisions import history
from panel.deployments.spec.apply import Change, apply
from panel.deployments.spec.request import DeploymentRequestSerializer
from panel.deployments.spec.scale import scale as scale_to
from panel.deployments.spec.spec import DeploymentSpecSerializer, parse_spec, spec_of
from panel.deployments.spec.undo import undo
from panel.realtime.broadcast import DEPLOYMENTS, deployment_group

MAX_LOG_LINES_PER_PAGE = 5000
# What stop / start / restart answer: the deployment as it now is, or why its state refuses the command.
ACCEPTED_OR_REFUSED = {202: DeploymentSerializer, 409: ErrorSerializer}


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


ALLOW_DOWNTIME = OpenApiParameter(
    "allow_downtime",
    bool,
    required=False,
    description="Go ahead when the change cannot start a surge replica first (no free NPUs) and the "
    "deployment serves from one replica: it stops serving for about the seconds the refusal (409, "
    "errors.allow_downtime) and the dry run's `downtime` warning say.",
)


def _refused(error: services.DeploymentConflict) -> Conflict:
    """409; a refusal about one parameter (allow_downtime) names it in `errors`."""
    field = getattr(error, "field", None)
    return Conflict({field: [str(error)]} if field else str(error))


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
    wait_actions = frozenset({"create", "update", "start", "stop", "restart", "destroy", "rollback", "scale"})
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
        if self.watching:  # ?watch=true: the stream (StreamsMixin), not one answer
            return super().retrieve(request, pk=pk)
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
            OpenApiParameter(
                "dry_run", bool, required=False, description="Plan and compare; change nothing."
            ),
            ALLOW_DOWNTIME,
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
        change = Change(allow_downtime=_flag(request.query_params.get("allow_downtime"), "allow_downtime"))
        try:
            outcome = apply(pk, spec, request.user, dry_run=dry_run, change=change)
        except services.DeploymentConflict as error:
            raise _refused(error) from None
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
            OpenApiParameter(
                "dry_run", bool, required=False, description="Plan and compare; change nothing."
            ),
            OpenApiParameter(
                "to_revision",
                int,
                required=False,
                description="Apply revision N again (GET …/revisions/) instead of the previous spec.",
            ),
            ALLOW_DOWNTIME,
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
        to_revision = request.query_params.get("to_revision")
        if to_revision is not None and not (to_revision.isascii() and to_revision.isdigit()):
            raise ValidationError({"to_revision": [_("Give a revision number (rollout history).")]})
        try:
            outcome = undo(
                self.get_object(),
                request.user,
                dry_run=dry_run,
                to_revision=int(to_revision) if to_revision is not None else None,
                allow_downtime=_flag(request.query_params.get("allow_downtime"), "allow_downtime"),
            )
        except services.DeploymentConflict as error:
            raise _refused(error) from None
        code = status.HTTP_200_OK if outcome.result == "unchanged" else status.HTTP_202_ACCEPTED
        return Response(answer_of(outcome, dry_run), status=code)

    @extend_schema(
        request=ScaleRequestSerializer,
        parameters=[
            OpenApiParameter(
                "dry_run", bool, required=False, description="Plan and compare; change nothing."
            ),
            ALLOW_DOWNTIME,
        ],
        responses={200: ApplyAnswerSerializer, 202: ApplyAnswerSerializer, 409: ErrorSerializer},
        description="Set the replica count, of one role (prefill or decode) for a deployment with roles: its "
        "spec with that count, applied as apply does (cause scale; a scale up or down decision naming the "
        "role). 400 `role` when a plain deployment is given a role or one with roles is not; 400 `replicas` "
        "when the autoscaler owns the count (the deployment's `autoscale:`, or that role's "
        "`roles.<role>.autoscale`).",
    )
    @action(detail=True, methods=["post"])
    @idempotent
    def scale(self, request, pk=None):
        body = ScaleRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        dry_run = _flag(request.query_params.get("dry_run"), "dry_run")
        try:
            outcome = scale_to(
                self.get_object(),
                body.validated_data["replicas"],
                body.validated_data["role"],
                request.user,
                dry_run=dry_run,
                allow_downtime=_flag(request.query_params.get("allow_downtime"), "allow_downtime"),
            )
        except services.DeploymentConflict as error:
            raise _refused(error) from None
        code = status.HTTP_200_OK if outcome.result == "unchanged" else status.HTTP_202_ACCEPTED
        return Response(answer_of(outcome, dry_run), status=code)

    @extend_schema(
        request=DeploymentCreateSerializer,
        responses={201: CreatedDeploymentSerializer, 409: ErrorSerializer},
    )
    @idempotent(creates=Deployment.objects.exclude(desired_state=DesiredState.DELETED))
    def create(self, request):
        asked = request.data.get("routing") if hasattr(request.data, "get") else None
        chosen = RoutingChoiceSerializer(data={} if asked is None else {"routing": asked})
        chosen.is_valid(raise_exception=True)  # the planner below ignores what is not the engine's
        planned = plan_request(request.data, user=request.user)
        try:
            deployment = commands.create(planned, user=request.user, routing=chosen.validated_data["routing"])
        except services.DeploymentConflict as error:
            raise Conflict(str(error)) from None
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
            raise _refused(error) from None
        deployment = Deployment.objects.filter(pk=deployment.pk).first() or deployment
        return Response(DeploymentSerializer(deployment).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses=ACCEPTED_OR_REFUSED)
    @action(detail=True, methods=["post"])
    def stop(self, request, pk=None):
        return self._command(request, commands.stop)

    @extend_schema(request=None, responses=ACCEPTED_OR_REFUSED)
    @action(detail=True, methods=["post"])
    def start(self, request, pk=None):
        return self._command(request, commands.start)

    @extend_schema(
        request=None,
        parameters=[ALLOW_DOWNTIME],
        responses=ACCEPTED_OR_REFUSED,
        description="A serving deployment restarts one replica at a time, each after a surge replica serves "
        "where NPUs allow (its `rollout` follows it); without room for a surge, one serving replica alone "
        "needs allow_downtime.",
    )
    @action(detail=True, methods=["post"])
    def restart(self, request, pk=None):
        allowed = _flag(request.query_params.get("allow_downtime"), "allow_downtime")
        return self._command(
            request, lambda deployment, user: commands.restart(deployment, user, allow_downtime=allowed)
        )

    @extend_schema(
        responses={202: DeletedDeploymentSerializer, 409: ErrorSerializer},
        description="Stop it, release its NPUs, then the row goes (a primary takes its replicas with it). "
        "One replica alone is refused (409): scale its primary instead.",
    )
    def destroy(self, request, pk=None):
        try:
            deployment = commands.delete(self.get_object(), user=request.user)
        except services.DeploymentConflict as error:
            raise Conflict(str(error)) from None
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

    @extend_schema(responses=RevisionListSerializer, filters=False)
    @action(detail=True, methods=["get"])
    def revisions(self, request, pk=None):
        """Every spec applied to the deployment, newest first: who, when, what changed, the effect and the
        outcome (as `rollout history`; `rollback?to_revision=N` applies one of them again)."""
        deployment = self.get_object()
        if deployment.replica_of_id:
            deployment = deployment.replica_of  # a replica's history is its primary's
        return Response({"deployment": deployment.name, "results": history(deployment)})

    @extend_schema(parameters=[EventQuerySerializer], responses=EventPageSerializer, filters=False)
    @action(detail=True, methods=["get"])
    def events(self, request, pk=None):
        """The serving decisions recorded for the deployment (scale, sleep and wake, NPU failover, rollouts,
        restarts), newest first: who decided, on what figures, why, and how it ended."""
        return Response(events_page(request, self, self.get_object()))

    @extend_schema(
        methods=["POST"], request=sleep_api.SleepBodySerializer,
        responses={200: sleep_api.SleepStateSerializer, 409: ErrorSerializer},
    )  # fmt: skip
    @extend_schema(methods=["GET"], responses=sleep_api.SleepStateSerializer, filters=False)
    @action(detail=True, methods=["get", "post"])
    def sleep(self, request, pk=None):
        """GET: whether its engine sleeps and when it last woke. POST: put it to sleep now (an idle:
        deployment; 409 when it cannot), recorded as a `sleep` decision."""
        deployment = self.get_object()
        if request.method == "GET":
            return Response(sleep_api.state(deployment))
        body = sleep_api.SleepBodySerializer(data=request.data or {})
        body.is_valid(raise_exception=True)
        try:
            return Response(sleep_api.sleep_by_hand(deployment, body.validated_data, request.user))
        except services.DeploymentConflict as error:
            raise _refused(error) from None

    @extend_schema(request=None, responses={200: sleep_api.SleepStateSerializer, 409: ErrorSerializer})
    @action(detail=True, methods=["post"])
    def wake(self, request, pk=None):
        """Wake its engine and wait until vLLM says it is awake, recorded as a `wake` decision."""
        try:
            return Response(sleep_api.wake_by_hand(self.get_object(), request.user))
        except services.DeploymentConflict as error:
            raise _refused(error) from None

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
