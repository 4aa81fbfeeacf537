from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.response import Response

from panel.core.rest.api import PanelViewSet
from panel.deployments.models import Deployment
from panel.forensics import services
from panel.forensics.api.serializers import CollectSerializer, DiagnosticsBundleSerializer
from panel.forensics.models import DiagnosticsBundle


class DiagnosticsBundleViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PanelViewSet):
    """Diagnostics bundles of deployments: POST collects one from every node of a deployment (engine log,
    npu-smi info, versions, environment, kernel log tail, CANN plog, device logs), GET .../download/ is the
    tar.gz with the nodes' clocks lined up (timeline.txt) and the first failing rank (MANIFEST.json)."""

    queryset = DiagnosticsBundle.objects.select_related("created_by")
    serializer_class = DiagnosticsBundleSerializer
    filterset_fields = ["deployment", "status"]

    @extend_schema(request=CollectSerializer, responses={202: DiagnosticsBundleSerializer})
    def create(self, request):
        data = CollectSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        name = data.validated_data["deployment"]
        deployment = Deployment.objects.visible_to(request.user).filter(name=name).first()
        if deployment is None:
            raise ValidationError({"deployment": [f"No deployment named {name}."]})
        try:
            bundle = services.collect(
                deployment, user=request.user, panel_url=request.build_absolute_uri("/")
            )
        except DjangoValidationError as error:
            raise ValidationError({"deployment": error.messages}) from None
        return Response(DiagnosticsBundleSerializer(bundle).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(responses={(200, "application/gzip"): OpenApiTypes.BINARY})
    @action(detail=True, methods=["get"])
    def download(self, request, pk=None):
        bundle = self.get_object()
        path = services.archive_path(bundle)
        if path is None:
            raise NotFound("This bundle has no archive (yet).")
        return FileResponse(path.open("rb"), as_attachment=True, filename=bundle.file_name)
