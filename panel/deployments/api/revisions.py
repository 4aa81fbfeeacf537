"""`GET /api/v1/deployments/{name}/revisions/`: every spec applied to the deployment, newest first."""

from rest_framework import serializers

from panel.deployments.api.apply import ChangeSerializer, SpecAnswerSerializer
from panel.deployments.models import Revision


class RevisionSerializer(serializers.Serializer):
    number = serializers.IntegerField(help_text="1 for the spec it was created with, then one per change.")
    created = serializers.DateTimeField()
    user = serializers.CharField(help_text="Who applied it; empty for the panel itself.")
    cause = serializers.ChoiceField(["create", "apply", "edit", "scale", "rollback"])
    restored = serializers.IntegerField(allow_null=True, help_text="A rollback: the revision it restored.")
    effect = serializers.CharField(help_text="What applying did, as apply's `effect` says.")
    changes = ChangeSerializer(many=True, help_text="Against the revision before.")
    outcome = serializers.ChoiceField([choice for choice, _label in Revision.OUTCOMES])
    message = serializers.CharField(allow_blank=True, help_text="Why it failed, or what its rollout said.")
    message_display = serializers.CharField(
        allow_blank=True, help_text="`message` in the request's language."
    )
    rollout = serializers.IntegerField(allow_null=True, help_text="The rolling update it started.")
    spec = SpecAnswerSerializer(
        help_text="The whole spec as applied: `rollout undo --to-revision N` applies it."
    )


class RevisionListSerializer(serializers.Serializer):
    deployment = serializers.CharField()
    results = RevisionSerializer(many=True)
