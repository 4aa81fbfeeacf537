from rest_framework import serializers

from panel.deployments.models import Benchmark, Deployment, DeploymentLog


class DeploymentSerializer(serializers.ModelSerializer):
    status = serializers.CharField(source="observed_state", read_only=True)
    status_display = serializers.CharField(source="get_observed_state_display", read_only=True)
    model_name = serializers.CharField(source="model.name", read_only=True)
    nodes = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)
    npus = serializers.SerializerMethodField()
    operation = serializers.SerializerMethodField()
    findings = serializers.SerializerMethodField()

    class Meta:
        model = Deployment
        fields = [
            "id", "name", "model", "model_name", "artifact", "nodes", "npus", "status", "status_display",
            "desired_state", "reason", "endpoint", "runtime", "runtime_kind", "restart_count",
            "failed_restarts", "next_restart_at", "spec", "plan", "metrics", "metrics_at", "operation",
            "findings", "created", "updated",
        ]  # fmt: skip
        read_only_fields = fields

    def get_npus(self, deployment):
        return [
            {"node": npu.node.name, "logic_id": npu.logic_id, "npu_id": npu.npu_id}
            for npu in deployment.npus.all()
        ]

    def get_operation(self, deployment):
        from panel.operations.models import Operation

        latest = Operation.objects.filter(target=deployment.name, kind__in=["deploy", "stop"]).order_by(
            "-created"
        )
        first = latest.values_list("id", flat=True).first()
        return str(first) if first else None

    def get_findings(self, deployment):
        """The toolkit's diagnose findings and the log tail of the last failed start, shown beside it."""
        runtime = deployment.runtime or {}
        return {"findings": runtime.get("findings") or [], "log_tail": runtime.get("log_tail") or []}


class DeploymentLogSerializer(serializers.ModelSerializer):
    class Meta:
        model = DeploymentLog
        fields = ["seq", "time", "node", "line"]


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
    class Meta:
        model = Benchmark
        fields = [
            "id", "deployment", "deployment_name", "model_name", "spec", "params", "status", "results",
            "error", "operation", "created",
        ]  # fmt: skip
        read_only_fields = fields
