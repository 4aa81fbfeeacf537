from django.db.models import OuterRef, Subquery
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from panel.core.domain.choices import (
    DeploymentState,
    DesiredState,
    OperationKind,
    OperationStatus,
    RoutingPolicy,
)
from panel.core.templatetags.panel_text import deployment_reason
from panel.deployments.launch.findings import findings_of
from panel.deployments.models import Benchmark, Deployment, DeploymentLog
from panel.deployments.rollouts.replicas import index_of as replica_index
from panel.deployments.rollouts.rollouts import progress
from panel.deployments.services import served_name_of
from panel.deployments.spec.request import DeploymentRequestSerializer, NodeChoiceSerializer
from panel.deployments.spec.spec import nodes_of
from panel.gateway.links import gateway_url
from panel.operations.models import Operation


class DeploymentNpuSerializer(serializers.Serializer):
    node = serializers.CharField()
    logic_id = serializers.IntegerField()
    npu_id = serializers.IntegerField()


class DeploymentFindingsSerializer(serializers.Serializer):
    findings = serializers.ListField(
        child=serializers.DictField(), help_text="Known Ascend error signatures found in the log."
    )
    log_tail = serializers.ListField(child=serializers.CharField(), help_text="Last log lines of that start.")


class NpuMemorySerializer(serializers.Serializer):
    total_bytes = serializers.IntegerField()
    weights_bytes = serializers.IntegerField()
    kv_cache_bytes = serializers.IntegerField()
    reserve_bytes = serializers.IntegerField()
    free_bytes = serializers.IntegerField()


class PlanReasonSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="A stable code, e.g. tp_does_not_divide_heads.")
    level = serializers.ChoiceField(["error", "warning", "info"], help_text="error: it will not run.")
    message = serializers.CharField()
    params = serializers.DictField(required=False)


class EnginePlanSerializer(serializers.Serializer):
    """The planner's answer for the engine (workers.engine.planner.plan.Plan)."""

    fits = serializers.BooleanField()
    tensor_parallel_size = serializers.IntegerField()
    data_parallel_size = serializers.IntegerField()
    nodes = serializers.IntegerField()
    weights_gb_per_npu = serializers.FloatField()
    kv_cache_tokens = serializers.IntegerField(help_text="Per engine, as vLLM logs it.")
    max_concurrent_seqs = serializers.IntegerField(help_text="Full max-model-len sequences an engine holds.")
    reasons = PlanReasonSerializer(many=True)
    enable_expert_parallel = serializers.BooleanField()
    dtype = serializers.CharField()
    quantization = serializers.CharField(allow_null=True)
    enforce_eager = serializers.BooleanField()
    max_model_len = serializers.IntegerField()
    gpu_memory_utilization = serializers.FloatField()
    block_size = serializers.IntegerField()
    weights_total_bytes = serializers.IntegerField(allow_null=True)
    weights_label = serializers.CharField(allow_null=True)
    kv_bytes_per_token = serializers.IntegerField()
    memory_per_npu = NpuMemorySerializer(allow_null=True)


class ReviewNodeSerializer(serializers.Serializer):
    node = serializers.CharField()
    role = serializers.ChoiceField(["single", "head", "follower"])
    logic_ids = serializers.ListField(child=serializers.IntegerField(), help_text="Empty on a CPU node.")
    argv = serializers.ListField(child=serializers.CharField())
    env = serializers.DictField(child=serializers.CharField())
    command = serializers.CharField(help_text="argv and env as one shell line, for people.")
    launch = serializers.DictField(help_text="What the node's agent is sent.")


class PlanReviewSerializer(serializers.Serializer):
    """What POST /deployments/plan/ answers: the plan and, per node, the exact command and environment."""

    fits = serializers.BooleanField()
    chip = serializers.ChoiceField(["910b", "a3", "310p", "cpu"])
    plan = EnginePlanSerializer(allow_null=True, help_text="None on a CPU node.")
    memory_per_npu = NpuMemorySerializer(allow_null=True)
    warnings = PlanReasonSerializer(many=True)
    nodes = ReviewNodeSerializer(many=True)


class ReplicaSerializer(serializers.Serializer):
    name = serializers.CharField()
    status = serializers.CharField()
    desired_state = serializers.CharField()
    role = serializers.CharField(help_text='"" plain, or prefill / decode of a disaggregated deployment.')


class RolloutSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.ChoiceField(["running", "succeeded", "failed"])
    phase = serializers.CharField(help_text="surge, replace, cleanup or done")
    done = serializers.IntegerField(help_text="Replicas that run the new launch.")
    total = serializers.IntegerField(help_text="Replicas the rollout replaces.")
    current = serializers.CharField(help_text="The replica being replaced.")
    surge = serializers.CharField(help_text="The extra replica started for it.")
    message = serializers.CharField(help_text="What the rollout does or why it stopped, in English.")
    message_display = serializers.CharField(help_text="`message` in the request's language.")
    created = serializers.DateTimeField()


LATEST_OPERATION = "latest_operation_id"


def launches_and_stops(target):
    """A deployment's deploy and stop operations, newest first (`target`: its name, or OuterRef("name"))."""
    kinds = [OperationKind.DEPLOY, OperationKind.STOP]
    return Operation.objects.filter(target=target, kind__in=kinds).order_by("-created")


def with_latest_operation(queryset):
    """Deployments with the id of their latest deploy or stop, for DeploymentSerializer's `operation`."""
    latest = launches_and_stops(OuterRef("name")).values("id")[:1]
    return queryset.annotate(**{LATEST_OPERATION: Subquery(latest)})


class DeploymentSerializer(serializers.ModelSerializer):
    status = serializers.ChoiceField(
        choices=DeploymentState.choices, source="observed_state", read_only=True, help_text="Observed state."
    )
    status_display = serializers.CharField(source="get_observed_state_display", read_only=True)
    reason_display = serializers.SerializerMethodField(help_text="`reason` in the request's language.")
    model_name = serializers.CharField(source="model.name", read_only=True)
    nodes = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)
    npus = serializers.SerializerMethodField()
    placement = serializers.SerializerMethodField(
        help_text="Where it runs, in the request's own shape: [{node, npus: [logic ids]}]."
    )
    operation = serializers.SerializerMethodField()
    findings = serializers.SerializerMethodField()
    replica_of = serializers.SlugRelatedField(
        slug_field="name",
        read_only=True,
        allow_null=True,
        help_text="The primary, for replicas 2..N of a spec.",
    )
    replicas = serializers.SerializerMethodField(help_text="On the primary: its other replicas.")
    rollout = serializers.SerializerMethodField(help_text="On the primary: its latest rolling update.")
    endpoint = serializers.SerializerMethodField(
        help_text="The OpenAI base URL to call (the panel's /v1 gateway); the model is `served_model_name`."
    )
    served_model_name = serializers.SerializerMethodField(
        help_text="The `model` clients send to the gateway."
    )
    labels = serializers.DictField(
        child=serializers.CharField(allow_blank=True),
        read_only=True,
        help_text="The spec's labels (on the primary); `?labels=app=chat,tier!=dev` selects by them.",
    )
    routing = serializers.CharField(
        read_only=True,
        help_text="How the gateway picks an instance (the spec's `routing:`, on the primary): "
        "least_outstanding, prefix or session.",
    )

    class Meta:
        model = Deployment
        fields = [
            "id", "name", "model", "model_name", "artifact", "nodes", "npus", "placement", "status",
            "status_display", "desired_state", "reason", "reason_display", "endpoint", "runtime",
            "runtime_kind", "restart_count", "failed_restarts", "next_restart_at", "drain_until", "spec",
            "plan", "metrics", "metrics_at", "operation", "findings", "replica_of", "replicas_wanted",
            "replicas", "rollout", "created", "updated", "served_model_name", "labels", "routing",
            "role", "roles_wanted",
        ]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(ReplicaSerializer(many=True))
    def get_replicas(self, deployment) -> list[dict]:
        rows = [row for row in deployment.replicas.all() if row.desired_state != DesiredState.DELETED]
        return [
            {
                "name": row.name,
                "status": row.observed_state,
                "desired_state": row.desired_state,
                "role": row.role,
            }
            for row in sorted(rows, key=lambda row: replica_index(deployment.name, row.name))
        ]

    @extend_schema_field(RolloutSerializer(allow_null=True))
    def get_rollout(self, deployment) -> dict | None:
        latest = max(deployment.rollouts.all(), key=lambda rollout: rollout.pk, default=None)
        return progress(latest)

    def get_endpoint(self, deployment) -> str:
        return deployment.endpoint or gateway_url(self.context.get("request"))

    def get_served_model_name(self, deployment) -> str:
        return served_name_of(deployment)

    def get_reason_display(self, deployment) -> str:
        return deployment_reason(deployment)

    @extend_schema_field(DeploymentNpuSerializer(many=True))
    def get_npus(self, deployment) -> list[dict]:
        return [
            {"node": npu.node.name, "logic_id": npu.logic_id, "npu_id": npu.npu_id}
            for npu in deployment.npus.all()
        ]

    @extend_schema_field(NodeChoiceSerializer(many=True))
    def get_placement(self, deployment) -> list[dict]:
        return nodes_of(deployment)

    @extend_schema_field(serializers.UUIDField(allow_null=True, help_text="Its latest deploy or stop."))
    def get_operation(self, deployment) -> str | None:
        # A list reads it from the annotation (DeploymentViewSet): one query for the page, not one a row.
        if hasattr(deployment, LATEST_OPERATION):
            first = getattr(deployment, LATEST_OPERATION)
        else:
            first = launches_and_stops(deployment.name).values_list("id", flat=True).first()
        return str(first) if first else None

    @extend_schema_field(DeploymentFindingsSerializer)
    def get_findings(self, deployment) -> dict:
        """The toolkit's diagnose findings and the log tail of the last failed start, shown beside it."""
        log_tail = (deployment.runtime or {}).get("log_tail") or []
        return {"findings": findings_of(deployment), "log_tail": log_tail}


def routing_field() -> serializers.ChoiceField:
    return serializers.ChoiceField(
        RoutingPolicy.values,
        required=False,
        default=RoutingPolicy.LEAST_OUTSTANDING,
        help_text="How the gateway picks an instance: least_outstanding, prefix (cache-aware) or session.",
    )


class RoutingChoiceSerializer(serializers.Serializer):
    """The create request's `routing` alone: the planner checks the rest of it."""

    routing = routing_field()


class DeploymentCreateSerializer(DeploymentRequestSerializer):
    """`POST /deployments/`: the wizard's request, and the gateway's routing policy for the deployment."""

    routing = routing_field()


class CreatedDeploymentSerializer(DeploymentSerializer):
    warnings = serializers.ListField(
        child=serializers.DictField(), read_only=True, help_text="The planner's warnings (level, message …)."
    )

    class Meta(DeploymentSerializer.Meta):
        fields = [*DeploymentSerializer.Meta.fields, "warnings"]
        read_only_fields = fields


class DeletedDeploymentSerializer(serializers.Serializer):
    deleted = serializers.BooleanField(help_text="False while its engines are still being stopped.")
    name = serializers.CharField()


class DeploymentLogSerializer(serializers.ModelSerializer):
    class Meta:
        model = DeploymentLog
        fields = ["seq", "time", "node", "line"]


class DeploymentLogQuerySerializer(serializers.Serializer):
    after_seq = serializers.IntegerField(
        required=False, default=0, min_value=0, help_text="Lines after this number."
    )
    limit = serializers.IntegerField(required=False, min_value=1, help_text="At most 5000 lines a page.")
    probes = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Include the engine's access lines for the panel's own probes (GET /health, /ping, "
        "/metrics every few seconds), which are left out by default. Line numbers skip what is left out.",
    )


class DeploymentLogPageSerializer(serializers.Serializer):
    deployment = serializers.CharField()
    last_seq = serializers.IntegerField()
    results = DeploymentLogSerializer(many=True)


class DeploymentMetricsSerializer(serializers.Serializer):
    deployment = serializers.CharField()
    metrics = serializers.DictField(help_text="The engine's latest figures, as scraped.")
    time = serializers.DateTimeField(allow_null=True)


class EngineMetricsPointSerializer(serializers.Serializer):
    time = serializers.FloatField(help_text="Scrape time, Unix seconds.")
    metrics = serializers.DictField(help_text="The figures the deployment page charts.")


class DeploymentMetricsHistorySerializer(serializers.Serializer):
    deployment = serializers.CharField()
    points = EngineMetricsPointSerializer(many=True, help_text="The last hour, oldest first, at most 600.")


class BenchmarkRequestSerializer(serializers.Serializer):
    concurrency = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=512),
        min_length=1,
        max_length=8,
        default=[1, 4, 16, 64],
    )
    prompt_len = serializers.IntegerField(min_value=1, max_value=32768, default=128)
    output_len = serializers.IntegerField(min_value=1, max_value=8192, default=128)
    requests = serializers.IntegerField(min_value=1, max_value=2048, default=64)


class BenchmarkSerializer(serializers.ModelSerializer):
    status = serializers.ChoiceField(choices=OperationStatus.choices, read_only=True)

    class Meta:
        model = Benchmark
        fields = [
            "id", "deployment", "deployment_name", "model_name", "spec", "params", "status", "results",
            "error", "operation", "created",
        ]  # fmt: skip
        read_only_fields = fields


class BenchmarkListSerializer(serializers.Serializer):
    results = BenchmarkSerializer(many=True)
