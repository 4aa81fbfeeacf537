from rest_framework import serializers

from panel.audit.models import AuditEntry


class AuditEntrySerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_name", read_only=True)

    class Meta:
        model = AuditEntry
        fields = ["id", "time", "actor", "action", "target", "ip", "details"]
        read_only_fields = fields
