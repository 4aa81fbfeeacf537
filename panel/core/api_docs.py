"""/api/schema/ and /api/docs/ need a signed-in user (session) or an API token, like the rest of the API:
the schema lists every endpoint and field, which is a map of the panel nobody outside it needs."""

from django.contrib.auth.views import redirect_to_login
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework import exceptions

from panel.accounts.permissions import RolePermission
from panel.core.api import StrictRequestMixin


class SchemaView(StrictRequestMixin, SpectacularAPIView):
    """Errors in JSON like every /api/ answer (its renderers are YAML and JSON)."""

    permission_classes = [RolePermission]


class DocsView(SpectacularSwaggerView):
    """The docs page is a page: an anonymous browser is sent to sign in, not shown a bare 401."""

    permission_classes = [RolePermission]

    def handle_exception(self, exc):
        if isinstance(exc, (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)):
            return redirect_to_login(self.request.get_full_path())
        return super().handle_exception(exc)
