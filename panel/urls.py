from django.conf import settings
from django.conf.urls.static import static
from django.contrib import admin
from django.templatetags.static import static as static_url
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from panel.accounts.api.views import ApiTokenViewSet
from panel.audit.api.views import AuditEntryViewSet
from panel.catalog.api.views import ModelArtifactViewSet, ModelViewSet, RecipeViewSet
from panel.core.rest.api_docs import DocsView, PanelRouter, SchemaView
from panel.core.rest.exceptions import api_not_found
from panel.deployments.api.chat import DeploymentChatView
from panel.deployments.api.views import BenchmarkViewSet, DeploymentViewSet
from panel.fabric.api.views import FabricCheckViewSet, NodeFabricViewSet
from panel.forensics.api.views import DiagnosticsBundleViewSet
from panel.gateway.api.views import UsageHourViewSet, UsageRecordViewSet
from panel.monitoring.api.notifications import (
    DeliveryViewSet,
    NotificationChannelViewSet,
    RouteViewSet,
    SilenceViewSet,
)
from panel.monitoring.api.views import AlertViewSet, LatestMetricsView
from panel.monitoring.views import prometheus_metrics
from panel.nodes.api.views import NodeViewSet
from panel.operations.api.views import OperationViewSet
from panel.provisioning.api.views import NodeStackViewSet, PackageFileViewSet, StackProfileViewSet

router = PanelRouter()
router.include_format_suffixes = False  # `.json` twins would shadow names with a dot (`/models/qwen2.5-7b/`)
router.register("nodes", NodeViewSet)
router.register("operations", OperationViewSet)
router.register("models", ModelViewSet)
router.register("model-artifacts", ModelArtifactViewSet)
router.register("recipes", RecipeViewSet, basename="recipe")
router.register("tokens", ApiTokenViewSet, basename="apitoken")
router.register("stack-profiles", StackProfileViewSet, basename="stack-profile")
router.register("packages", PackageFileViewSet)
router.register("node-stacks", NodeStackViewSet, basename="node-stack")
router.register("alerts", AlertViewSet)
router.register("notification-channels", NotificationChannelViewSet)
router.register("notification-routes", RouteViewSet)
router.register("silences", SilenceViewSet)
router.register("deliveries", DeliveryViewSet)
router.register("deployments", DeploymentViewSet)
router.register("benchmarks", BenchmarkViewSet)
router.register("audit", AuditEntryViewSet)
router.register("fabric-checks", FabricCheckViewSet)
router.register("node-fabrics", NodeFabricViewSet, basename="node-fabric")
router.register("diagnostics", DiagnosticsBundleViewSet)
router.register("usage", UsageRecordViewSet, basename="usage")
router.register("usage-hourly", UsageHourViewSet, basename="usage-hourly")

urlpatterns = [
    path("api/v1/metrics/latest/", LatestMetricsView.as_view(), name="metrics-latest"),
    # <pk>: an id or a name, as in the router's routes. The playground is a plain async view.
    path("api/v1/deployments/<str:pk>/chat/", DeploymentChatView.as_view(), name="deployment-chat"),
    # A file to download: its name has no trailing slash.
    path(
        "api/v1/deployments/<str:pk>/logs.txt",
        DeploymentViewSet.as_view({"get": "logs_txt"}, detail=True, basename="deployment"),
        name="deployment-logs-txt",
    ),
    path("api/v1/", include(router.urls)),
    path("metrics", prometheus_metrics, name="prometheus-metrics"),
    path("usage/", include("panel.gateway.urls")),
    path("alerts/", include("panel.monitoring.urls")),
    path("api/schema/", SchemaView.as_view(), name="schema"),
    path("api/docs/", DocsView.as_view(url_name="schema"), name="api-docs"),
    re_path(r"^api/", api_not_found),  # the JSON 404 for every other /api/ URL, DEBUG or not
    path("i18n/", include("django.conf.urls.i18n")),
    path("admin/", admin.site.urls),  # Django's own admin; users and roles are at accounts/users/
    # Browsers ask for /favicon.ico where a page names no icon (API responses, files).
    path("favicon.ico", RedirectView.as_view(url=static_url("favicon.svg"), permanent=True)),
    path("accounts/", include("panel.accounts.urls")),
    path("nodes/", include("panel.nodes.urls")),
    path("operations/", include("panel.operations.urls")),
    path("provisioning/", include("panel.provisioning.urls")),
    path("models/", include("panel.catalog.urls")),
    path("deployments/", include("panel.deployments.urls")),
    path("audit/", include("panel.audit.urls")),
    path("fabric/", include("panel.fabric.urls")),
    path("forensics/", include("panel.forensics.urls")),
    path("", include("panel.core.urls")),
]
urlpatterns += static(settings.STATIC_URL)
handler404, handler500 = "panel.core.rest.exceptions.not_found", "panel.core.rest.exceptions.server_error"
