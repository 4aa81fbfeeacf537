from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from panel.accounts.models import SCOPES, ApiToken
from panel.core.domain.names import TOKEN_NAME
from panel.core.rest.names import NameField
from workers.engine.launch.command import SERVED_NAME_PATTERN


class ApiTokenSerializer(serializers.ModelSerializer):
    name = NameField(TOKEN_NAME)
    usable = serializers.BooleanField(source="is_usable", read_only=True)
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=SCOPES),
        min_length=1,
        required=False,
        help_text="inference (the /v1 gateway), deploy (the panel's API but users and tokens), admin (all "
        "the owner may do). Left out: all the issuer may give.",
    )
    models = serializers.ListField(
        source="allowed_models",
        child=serializers.CharField(max_length=128),
        required=False,
        help_text="Served model names the gateway accepts from this token; empty: every model.",
    )
    requests_per_minute = serializers.IntegerField(min_value=1, allow_null=True, required=False)
    tokens_per_minute = serializers.IntegerField(min_value=1, allow_null=True, required=False)

    class Meta:
        model = ApiToken
        fields = [
            "id", "name", "prefix", "created", "expires", "last_used", "revoked", "usable",
            "scopes", "models", "requests_per_minute", "tokens_per_minute",
        ]  # fmt: skip
        read_only_fields = ["prefix", "created", "last_used", "revoked"]

    def validate_expires(self, value):
        if value is not None and value <= timezone.now():
            raise serializers.ValidationError(_("The expiry must be in the future."))
        return value

    def validate_name(self, value):
        user = self.context["request"].user
        if ApiToken.objects.filter(user=user, name=value).exists():
            raise serializers.ValidationError(_("You already have a token with this name."))
        return value

    def validate_models(self, value):
        bad = [name for name in value if not SERVED_NAME_PATTERN.fullmatch(name)]
        if bad:
            raise serializers.ValidationError(
                _("Not a served model name: {names}.").format(names=", ".join(bad))
            )
        return value


class NewApiTokenSerializer(ApiTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="The raw token. Shown once; store it now.")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]


class SignInSerializer(serializers.Serializer):
    """What a script sends to exchange a user name and password for a new API token of that user."""

    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, trim_whitespace=False, write_only=True)
    name = NameField(TOKEN_NAME, help_text="The new token's name, unique among yours.")
    expires = serializers.DateTimeField(required=False, allow_null=True, default=None)

    def validate_expires(self, value):
        if value is not None and value <= timezone.now():
            raise serializers.ValidationError(_("The expiry must be in the future."))
        return value
