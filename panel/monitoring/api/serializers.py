from rest_framework import serializers

from panel.monitoring.models import Alert


class AlertSerializer(serializers.ModelSerializer):
    node = serializers.CharField(
        source="node.name",
        read_only=True,
        default=None,
        allow_null=True,
        help_text="Empty on a deployment's alert.",
    )
    deployment = serializers.CharField(
        read_only=True, help_text="The deployment a deployment alert is about."
    )
    acknowledged_by = serializers.CharField(
        source="acknowledged_by.username", read_only=True, default=None, allow_null=True
    )

    class Meta:
        model = Alert
        fields = [
            "id",
            "node",
            "deployment",
            "key",
            "kind",
            "severity",
            "npu_id",
            "chip_id",
            "message",
            "first_seen",
            "last_seen",
            "acknowledged_by",
            "acknowledged_at",
            "resolved_at",
        ]
        read_only_fields = fields


class MetricHistorySerializer(serializers.Serializer):
    """Columnar history for uPlot: `time` holds bucket starts (Unix seconds); every series in `series` is
    as long as `time`, with null where no figure was read. Names: `host.cpu`, `host.memory_used`,
    `host.load1`, and `npu.<npu_id>.<chip_id>.<util|hbm_used|memory_used|power|temp>` (util in %, memory
    in MB, power in W, temp in °C). When a point covers more than one sample, `<name>.max` holds the
    largest figure in it (the plain name holds the mean)."""

    node = serializers.CharField()
    since = serializers.DateTimeField()
    step = serializers.IntegerField(help_text="Seconds per point.")
    source = serializers.ChoiceField(
        choices=["ring", "minutes"], help_text="ring: full resolution, last hour; minutes: 1-minute table."
    )
    time = serializers.ListField(child=serializers.IntegerField())
    series = serializers.DictField(child=serializers.ListField(child=serializers.FloatField(allow_null=True)))


class SetMetricsIntervalSerializer(serializers.Serializer):
    interval_s = serializers.FloatField(min_value=0.2, max_value=3600)


class MetricsIntervalSetSerializer(SetMetricsIntervalSerializer):
    """The answer: the interval the node's agent was told to use."""

    node = serializers.CharField()
