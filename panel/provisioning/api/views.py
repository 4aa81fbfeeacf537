from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.response import Response

from panel.accounts.roles import ADMIN, OPERATOR
from panel.core.rest.api import PanelViewSet, StrictRequestMixin
from panel.core.rest.idempotency import idempotent
from panel.nodes.models import Node
from panel.operations.api.serializers import OperationSerializer
from panel.operations.models import Operation
from panel.provisioning import services, store
from panel.provisioning.api.serializers import (
    CancelSerializer,
    ConfirmReplacementSerializer,
    InstallSerializer,
    NodeStackSerializer,
    PackageFileSerializer,
    StartSerializer,
)
from panel.provisioning.models import PackageFile
from panel.provisioning.profiles import cpu_row, profile_rows


def _drf_error(error: DjangoValidationError) -> ValidationError:
    return ValidationError(error.message_dict if hasattr(error, "error_dict") else {"detail": error.messages})


class StackProfileViewSet(StrictRequestMixin, viewsets.ViewSet):
    """The compatibility matrix: one row per documented vllm-ascend set, plus the CPU profile."""

    @extend_schema(responses={200: dict})
    def list(self, request):
        return Response({"profiles": profile_rows(), "cpu": cpu_row()})


class PackageFileViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    PanelViewSet,
):
    """The package store: upload a new name with the vendor's SHA-256 (operator: it waits for an admin's
    approval, sha256 empty), list with sha256, delete (admin). Uploading an existing name (admin) leaves a
    pending replacement (pending_sha256): nodes keep the confirmed file until an admin confirms the new
    checksum (confirm, which also approves a new name) or discards it (discard)."""

    queryset = PackageFile.objects.select_related("uploaded_by", "pending_uploaded_by")
    serializer_class = PackageFileSerializer
    parser_classes = [MultiPartParser, FormParser, JSONParser]
    ADMIN_ACTIONS = ("destroy", "confirm", "discard")

    @property
    def write_role(self):
        return ADMIN if self.action in self.ADMIN_ACTIONS else OPERATOR

    def perform_create(self, serializer):
        try:
            serializer.instance = store.add_package(
                serializer.validated_data["file"],
                user=self.request.user,
                vendor_sha256=serializer.validated_data["vendor_sha256"],
            )
        except DjangoValidationError as error:
            raise _drf_error(error) from None
        except DjangoPermissionDenied as error:
            raise PermissionDenied(str(error)) from None

    def perform_destroy(self, instance):
        store.delete_package(instance, user=self.request.user)

    @extend_schema(request=ConfirmReplacementSerializer, responses=PackageFileSerializer)
    @action(detail=True, methods=["post"])
    def confirm(self, request, pk=None):
        """Approve a new package or put the pending replacement in use; `sha256` must be the pending
        file's."""
        data = ConfirmReplacementSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            package = store.confirm_replacement(
                self.get_object(), data.validated_data["sha256"], user=request.user
            )
        except DjangoValidationError as error:
            raise _drf_error(error) from None
        return Response(PackageFileSerializer(package).data)

    @extend_schema(request=None, responses=PackageFileSerializer)
    @action(detail=True, methods=["post"])
    def discard(self, request, pk=None):
        """Drop the pending replacement; the confirmed file stays in use."""
        try:
            package = store.discard_replacement(self.get_object(), user=request.user)
        except DjangoValidationError as error:
            raise _drf_error(error) from None
        return Response(PackageFileSerializer(package).data)


class NodeStackViewSet(PanelViewSet):
    """A node's stack and last preflight; actions preflight, install, resume and cancel."""

    queryset = Node.objects.all()
    lookup_field = "name"
    serializer_class = NodeStackSerializer

    def _panel_url(self):
        return self.request.build_absolute_uri("/")

    def retrieve(self, request, name=None):
        return Response(NodeStackSerializer(services.stack_of(self.get_object())).data)

    def _started(self, operation):
        return Response(OperationSerializer(operation).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=StartSerializer, responses={202: OperationSerializer})
    @action(detail=True, methods=["post"])
    def preflight(self, request, name=None):
        data = StartSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            operation = services.start_preflight(
                self.get_object(),
                data.validated_data["profile"],
                user=request.user,
                panel_url=self._panel_url(),
                pip_source=data.validated_data["pip_source"],
            )
        except DjangoValidationError as error:
            raise _drf_error(error) from None
        return self._started(operation)

    @extend_schema(request=InstallSerializer, responses={202: OperationSerializer})
    @action(detail=True, methods=["post"])
    @idempotent(creates=Operation.objects.all())
    def install(self, request, name=None):
        """Refused (400, `preflight`) while the node's preflight of this profile has failed checks, unless
        an admin overrides each with a reason (`overrides`); a profile the node's chip or driver does not
        fit is refused (400, `profile`) naming it."""
        data = InstallSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            operation = services.start_install(
                self.get_object(),
                data.validated_data["profile"],
                user=request.user,
                panel_url=self._panel_url(),
                pip_source=data.validated_data["pip_source"],
                allow_reboot=data.validated_data["allow_reboot"],
                overrides=data.validated_data["overrides"],
            )
        except DjangoValidationError as error:
            raise _drf_error(error) from None
        except DjangoPermissionDenied as error:
            raise PermissionDenied(str(error)) from None
        return self._started(operation)

    @extend_schema(request=None, responses={202: OperationSerializer})
    @action(detail=True, methods=["post"])
    def resume(self, request, name=None):
        try:
            operation = services.resume_install(
                self.get_object(), user=request.user, panel_url=self._panel_url()
            )
        except DjangoValidationError as error:
            raise _drf_error(error) from None
        return self._started(operation)

    @extend_schema(request=CancelSerializer, responses={202: None})
    @action(detail=True, methods=["post"])
    def cancel(self, request, name=None):
        data = CancelSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        node = self.get_object()
        operation = get_object_or_404(
            Operation.objects.visible_to(request.user), pk=data.validated_data["operation"], node=node
        )
        try:
            services.cancel(operation)
        except DjangoValidationError as error:
            raise _drf_error(error) from None
        return Response({"detail": "cancel requested"}, status=status.HTTP_202_ACCEPTED)
