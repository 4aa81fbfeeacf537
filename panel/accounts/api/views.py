from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, mixins, status, viewsets
from rest_framework.response import Response

from panel.accounts import services
from panel.accounts.api.serializers import ApiTokenSerializer, NewApiTokenSerializer
from panel.accounts.models import SCOPE_ADMIN, ApiToken
from panel.accounts.roles import VIEWER


class ApiTokenViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Your own API tokens. Creating returns the raw token once; deleting revokes it (the record stays).
    A token creating one (admin scope) may not give more than it has."""

    serializer_class = ApiTokenSerializer
    write_role = VIEWER  # everyone manages their own tokens; what a token may do is the user's role
    token_scope = SCOPE_ADMIN  # deploy tokens run deployments, they do not hand out credentials

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator asks with no user
            return ApiToken.objects.none()
        return ApiToken.objects.filter(user=self.request.user)

    @extend_schema(request=ApiTokenSerializer, responses={201: NewApiTokenSerializer})
    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        parent = request.auth if isinstance(request.auth, ApiToken) else None
        grant = services.default_grant(parent)
        for name in ("scopes", "allowed_models", "requests_per_minute", "tokens_per_minute"):
            if name in data:
                setattr(grant, name, data[name])
        problems = services.wider_than_parent(grant, data.get("expires"), parent)
        if problems:
            raise exceptions.PermissionDenied({name: [text] for name, text in problems.items()})
        token, raw = services.issue_token(request.user, data["name"], data.get("expires"), grant)
        token.token = raw
        return Response(NewApiTokenSerializer(token).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance):
        services.revoke_token(instance)
