from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.response import Response

from panel.accounts import services
from panel.accounts.api.serializers import ApiTokenSerializer, NewApiTokenSerializer
from panel.accounts.models import ApiToken
from panel.accounts.roles import VIEWER
from panel.core.api import PanelViewSet


class ApiTokenViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    PanelViewSet,
):
    """Your own API tokens, by id or by name. Creating returns the raw token once; deleting revokes it (the
    record stays)."""

    serializer_class = ApiTokenSerializer
    write_role = VIEWER  # everyone manages their own tokens; what a token may do is the user's role

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator asks with no user
            return ApiToken.objects.none()
        return ApiToken.objects.filter(user=self.request.user)  # names are unique per user

    @extend_schema(request=ApiTokenSerializer, responses={201: NewApiTokenSerializer})
    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        token, raw = services.issue_token(
            request.user, serializer.validated_data["name"], serializer.validated_data.get("expires")
        )
        token.token = raw
        return Response(NewApiTokenSerializer(token).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance):
        services.revoke_token(instance)
