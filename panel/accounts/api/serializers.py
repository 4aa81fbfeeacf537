from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from panel.accounts.models import ApiToken


class ApiTokenSerializer(serializers.ModelSerializer):
    usable = serializers.BooleanField(source="is_usable", read_only=True)

    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created", "expires", "last_used", "revoked", "usable"]
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


class NewApiTokenSerializer(ApiTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="The raw token. Shown once; store it now.")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]


class SignInSerializer(serializers.Serializer):
    """What a script sends to exchange a user name and password for a new API token of that user."""

    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, trim_whitespace=False, write_only=True)
    name = serializers.CharField(max_length=100, help_text="The new token's name, unique among yours.")
    expires = serializers.DateTimeField(required=False, allow_null=True, default=None)

    def validate_expires(self, value):
        if value is not None and value <= timezone.now():
            raise serializers.ValidationError(_("The expiry must be in the future."))
        return value
