"""The API of notification channels, routes, silences and deliveries. Admins write; a channel (whose URL
may carry a bot's key) and its deliveries are read by admins only, routes and silences by every role. A
channel's secret is write-only: sealed on the way in (panel.core.infra.secrets), never answered."""

from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from panel.accounts.roles import ADMIN
from panel.core.infra import secrets
from panel.core.rest.api import PanelViewSet, ReadOnlyPanelViewSet
from panel.monitoring.models import (
    AlertKind,
    AlertSeverity,
    Delivery,
    NotificationChannel,
    Route,
    Silence,
)
from panel.monitoring.notifications import notify


def kinds_field() -> serializers.ListField:
    return serializers.ListField(
        child=serializers.ChoiceField(choices=AlertKind.choices), required=False, help_text="Empty: all."
    )


class ChannelSerializer(serializers.ModelSerializer):
    secret = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        max_length=2000,
        help_text="The bot's signing secret, the SMTP password or the webhook's bearer token. Write-only; "
        "left out keeps the one set, empty clears it.",
    )
    has_secret = serializers.BooleanField(read_only=True)

    class Meta:
        model = NotificationChannel
        fields = [
            "id", "name", "kind", "url", "secret", "has_secret", "smtp_host", "smtp_port", "smtp_security",
            "smtp_user", "email_from", "email_to", "enabled", "created",
        ]  # fmt: skip
        read_only_fields = ["created"]

    def validate(self, attrs):
        fields = ("kind", "url", "smtp_host", "email_to")
        merged = {field: attrs.get(field, getattr(self.instance, field, "")) for field in fields}
        missing = NotificationChannel(**merged).missing()
        if missing:
            raise serializers.ValidationError({field: [why] for field, why in missing.items()})
        return attrs

    def _seal(self, validated):
        if "secret" in validated:
            plain = validated.pop("secret")
            validated["secret"] = secrets.encrypt(plain) if plain else ""
        return validated

    def create(self, validated_data):
        return super().create(self._seal(validated_data))

    def update(self, instance, validated_data):
        return super().update(instance, self._seal(validated_data))


class RouteSerializer(serializers.ModelSerializer):
    channel = serializers.SlugRelatedField(slug_field="name", queryset=NotificationChannel.objects.all())
    severities = serializers.ListField(
        child=serializers.ChoiceField(choices=AlertSeverity.choices), required=False, help_text="Empty: all."
    )
    kinds = kinds_field()

    class Meta:
        model = Route
        fields = ["id", "name", "channel", "severities", "kinds", "node_label", "enabled", "created"]
        read_only_fields = ["created"]

    def validate_node_label(self, value):
        if value and "=" not in value:
            raise serializers.ValidationError(_("Write the label as key=value."))
        return value


class SilenceSerializer(serializers.ModelSerializer):
    kinds = kinds_field()
    starts_at = serializers.DateTimeField(required=False, help_text="Left out: now.")
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None)

    class Meta:
        model = Silence
        fields = [
            "id",
            "kinds",
            "node",
            "deployment",
            "starts_at",
            "ends_at",
            "reason",
            "created_by",
            "created",
        ]
        read_only_fields = ["created"]

    def validate(self, attrs):
        starts = attrs.get("starts_at") or getattr(self.instance, "starts_at", None) or timezone.now()
        ends = attrs.get("ends_at") or getattr(self.instance, "ends_at", None)
        if ends is None or ends <= starts or ends <= timezone.now():
            raise serializers.ValidationError(
                {"ends_at": [_("A silence ends in the future, after it starts.")]}
            )
        attrs["starts_at"] = starts
        return attrs


class DeliverySerializer(serializers.ModelSerializer):
    channel = serializers.CharField(source="channel.name", read_only=True)

    class Meta:
        model = Delivery
        fields = ["id", "channel", "alert", "event", "attempt", "status", "response_code", "error", "time"]
        read_only_fields = fields


class AdminWritesViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    PanelViewSet,
):
    write_role = ADMIN
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]


class NotificationChannelViewSet(AdminWritesViewSet):
    """Where alerts are sent, by id or by name. Admins only (a bot's URL carries its key)."""

    queryset = NotificationChannel.objects.all()
    serializer_class = ChannelSerializer
    read_role = ADMIN

    @extend_schema(request=None, responses={201: DeliverySerializer})
    @action(detail=True, methods=["post"])
    def test(self, request, pk=None):
        """Send a test notification now (once, not retried) and answer its recorded delivery."""
        delivery = notify.send_test(self.get_object())
        return Response(DeliverySerializer(delivery).data, status=status.HTTP_201_CREATED)


class RouteViewSet(AdminWritesViewSet):
    """Which alerts go to which channel, by id or by name."""

    queryset = Route.objects.select_related("channel")
    serializer_class = RouteSerializer


class SilenceViewSet(AdminWritesViewSet):
    """Sends of matching alerts are held until a silence ends (then sent)."""

    queryset = Silence.objects.select_related("created_by")
    serializer_class = SilenceSerializer
    lookup_name_field = None

    def perform_create(self, serializer):
        serializer.save(created_by=self.request.user)


class DeliveryViewSet(ReadOnlyPanelViewSet):
    """Every send to a channel: attempt, outcome, response code or error. Admins only."""

    queryset = Delivery.objects.select_related("channel")
    serializer_class = DeliverySerializer
    read_role = ADMIN
    lookup_name_field = None
