"""/api/schema/ and /api/docs/ need a signed-in user (session) or an API token, like the rest of the API:
the schema lists every endpoint and field, which is a map of the panel nobody outside it needs.

The schema lists every route under /api/v1/ (tests/integration/test_api_schema.py walks the URL conf to
hold it to that): the router's root is documented here, the deployment playground (a plain async view) by
its own postprocessing hook, panel.deployments.api.chat.document_chat."""

from django.contrib.auth.views import redirect_to_login
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework import exceptions, routers
from rest_framework.schemas.inspectors import DefaultSchema

from panel.accounts.permissions import RolePermission
from panel.core.rest.api import StrictRequestMixin


class SchemaView(StrictRequestMixin, SpectacularAPIView):
    """Errors in JSON like every /api/ answer (its renderers are YAML and JSON)."""

    permission_classes = [RolePermission]


class DocsView(SpectacularSwaggerSplitView):
    """The docs page is a page: an anonymous browser is sent to sign in, not shown a bare 401. Its
    script comes from the same URL (?script), not inline: the Content-Security-Policy refuses inline ones."""

    permission_classes = [RolePermission]

    def handle_exception(self, exc):
        if isinstance(exc, (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)):
            return redirect_to_login(self.request.get_full_path())
        return super().handle_exception(exc)


class ApiRootView(StrictRequestMixin, routers.APIRootView):
    """GET /api/v1/: each resource and the URL of its list. DRF leaves its root out of the schema."""

    schema = DefaultSchema()

    @extend_schema(
        operation_id="v1_root",
        responses={
            200: {
                "type": "object",
                "description": "Each resource's name and the URL of its list.",
                "additionalProperties": {"type": "string", "format": "uri"},
            }
        },
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class PanelRouter(routers.DefaultRouter):
    APIRootView = ApiRootView
