from rest_framework import serializers

from panel.gateway.models import UsageHour, UsageRecord


class UsageRecordSerializer(serializers.ModelSerializer):
    deployment = serializers.CharField(source="deployment_name", read_only=True)

    class Meta:
        model = UsageRecord
        fields = [
            "request_id", "time", "key", "user", "model", "deployment", "instance", "endpoint", "stream",
            "status", "error", "prompt_tokens", "completion_tokens", "ttft_ms", "duration_ms", "attempts",
        ]  # fmt: skip
        read_only_fields = fields


class UsageHourSerializer(serializers.ModelSerializer):
    deployment = serializers.CharField(source="deployment_name", read_only=True)

    class Meta:
        model = UsageHour
        fields = [
            "hour", "key", "user", "model", "deployment", "requests", "errors", "prompt_tokens",
            "completion_tokens", "ttft_ms_sum", "ttft_count", "duration_ms_sum",
        ]  # fmt: skip
        read_only_fields = fields
