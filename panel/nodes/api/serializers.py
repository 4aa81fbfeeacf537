from rest_framework import serializers

from panel.nodes.models import Node, Npu


class NpuSerializer(serializers.ModelSerializer):
    class Meta:
        model = Npu
        fields = [
            "id",
            "npu_id",
            "chip_id",
            "logic_id",
            "device_id",
            "name",
            "health",
            "hbm_total_mb",
            "memory_total_mb",
            "bus_id",
            "numa_node",
        ]


class NodeSerializer(serializers.ModelSerializer):
    status = serializers.CharField(source="effective_status", read_only=True)
    npus = NpuSerializer(many=True, read_only=True)

    class Meta:
        model = Node
        fields = [
            "id",
            "name",
            "address",
            "transport",
            "status",
            "labels",
            "cordoned",
            "last_heartbeat",
            "agent_version",
            "facts",
            "versions",
            "inventory_changes",
            "inventoried_at",
            "npus",
            "created",
        ]
        read_only_fields = [
            "last_heartbeat",
            "agent_version",
            "facts",
            "versions",
            "inventory_changes",
            "inventoried_at",
            "created",
        ]
