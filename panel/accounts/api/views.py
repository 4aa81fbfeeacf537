from django.contrib.auth import authenticate, user_logged_in
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, mixins, permissions, status
from rest_framework.decorators import action
from rest_framework.exceptions import APIException
from rest_framework.response import Response

from panel.accounts import services
from panel.accounts.api.serializers import ApiTokenSerializer, NewApiTokenSerializer, SignInSerializer
from panel.accounts.models import SCOPE_ADMIN, ApiToken
from panel.accounts.roles import VIEWER, has_role
from panel.accounts.temporary import PASSWORD_CHANGE_FIRST, must_change_password
from panel.core.rest.api import PanelViewSet
from panel.core.rest.schema import ErrorSerializer


class SignInFailed(APIException):
    # Not DRF's AuthenticationFailed: with no authentication class on the view DRF would turn that into a 403.
    status_code = status.HTTP_401_UNAUTHORIZED
    default_code = "sign_in_failed"


class ApiTokenViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    PanelViewSet,
):
    """Your own API tokens, by id or by name. Creating returns the raw token once; deleting revokes it (the
    record stays). A token creating one (admin scope) may not give more than it has."""

    serializer_class = ApiTokenSerializer
    write_role = VIEWER  # everyone manages their own tokens; what a token may do is the user's role
    token_scope = SCOPE_ADMIN  # deploy tokens run deployments, they do not hand out credentials

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator asks with no user
            return ApiToken.objects.none()
        return ApiToken.objects.filter(user=self.request.user)  # names are unique per user

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

    @extend_schema(
        request=SignInSerializer,
        responses={
            201: NewApiTokenSerializer,
            401: ErrorSerializer,
            403: ErrorSerializer,
            429: ErrorSerializer,
        },
        auth=[],
        description=(
            "Sign in with a user name and password and get a new API token of that user (what "
            "`ascend-panel login` does). It is a password sign-in like the sign-in page: audited, and locked "
            "for the cool-off after repeated failures from one address (429)."
        ),
    )
    @action(
        detail=False,
        methods=["post"],
        url_path="sign-in",
        authentication_classes=[],  # the body carries the credentials; no session, so no CSRF
        permission_classes=[permissions.AllowAny],
    )
    def sign_in(self, request):
        data = SignInSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        # Django's authenticate on the Django request: django-axes' backend checks the lockout first, a
        # failure is counted and audited (user_login_failed), and AxesMiddleware turns a lockout into 429.
        user = authenticate(request._request, username=values["username"], password=values["password"])
        if user is None:
            raise SignInFailed(_("Wrong user name or password."))
        if not has_role(user, VIEWER):
            return Response(
                {"detail": _("Your account has no role yet; ask an admin to give it one.")},
                status=status.HTTP_403_FORBIDDEN,
            )
        if must_change_password(user):
            return Response({"detail": PASSWORD_CHANGE_FIRST}, status=status.HTTP_403_FORBIDDEN)
        if ApiToken.objects.filter(user=user, name=values["name"]).exists():
            return Response(
                {
                    "detail": _("You already have a token with this name."),
                    "errors": {"name": [_("You already have a token with this name.")]},
                },
                status=status.HTTP_400_BAD_REQUEST,
            )
        token, raw = services.issue_token(user, values["name"], values["expires"])
        # A sign-in like the page's: audited with the address, resets django-axes' failure count, last_login.
        user_logged_in.send(sender=user.__class__, request=request._request, user=user)
        token.token = raw
        return Response(NewApiTokenSerializer(token).data, status=status.HTTP_201_CREATED)
