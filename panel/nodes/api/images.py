"""The node's container images in the API: GET /nodes/{id}/images/, POST .../images/pull/, .../load/,
.../remove/ and .../refresh/ (each starts an operation: 202 with it; 409 when the node or the image's use
refuses)."""

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from panel.core.rest.schema import ErrorSerializer
from panel.deployments.launch import images
from panel.deployments.launch.containers import containers_of
from panel.nodes.api.common import Conflict, panel_url, validation_error
from panel.operations.api.serializers import OperationSerializer
from panel.provisioning.models import PackageFile

STARTED_OR_REFUSED = {202: OperationSerializer, 409: ErrorSerializer}


class ImageSerializer(serializers.Serializer):
    reference = serializers.CharField()
    repository = serializers.CharField()
    tag = serializers.CharField()
    id = serializers.CharField()
    size_bytes = serializers.IntegerField(allow_null=True)
    created = serializers.CharField()
    used_by = serializers.ListField(child=serializers.CharField(), help_text="deployments on this node")


class NodeImagesSerializer(serializers.Serializer):
    engine = serializers.CharField(allow_null=True, help_text="the engine containers run with, or null")
    engines = serializers.ListField(
        child=serializers.DictField(), help_text="every engine the inventory found"
    )
    ascend_docker_runtime = serializers.DictField()
    images = ImageSerializer(many=True)


class ImageRequestSerializer(serializers.Serializer):
    image = serializers.CharField(max_length=255, help_text="e.g. quay.io/ascend/vllm-ascend:v0.11.0")


class LoadRequestSerializer(serializers.Serializer):
    package = serializers.IntegerField(help_text="id of a container image archive in the package store")


class NodeImagesMixin:
    """Actions mixed into NodeViewSet."""

    def _image_operation(self, start, *args, **kwargs):
        try:
            operation = start(*args, **kwargs)
        except images.ImageRefused as error:
            raise Conflict(str(error)) from error
        except DjangoValidationError as error:
            raise validation_error(error) from error
        return Response(OperationSerializer(operation).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(responses=NodeImagesSerializer)
    @action(detail=True, methods=["get"], url_path="images")
    def images(self, request, pk=None):
        """The node's container engines and images as the last inventory or image operation saw them."""
        node = self.get_object()
        facts = containers_of(node)
        body = {
            "engine": facts.get("engine"),
            "engines": [{k: v for k, v in e.items() if k != "images"} for e in facts.get("engines") or []],
            "ascend_docker_runtime": facts.get("ascend_docker_runtime") or {},
            "images": images.image_rows(node),
        }
        return Response(NodeImagesSerializer(body).data)

    @extend_schema(request=None, responses=STARTED_OR_REFUSED)
    @action(detail=True, methods=["post"], url_path="images/refresh")
    def images_refresh(self, request, pk=None):
        """List the node's engines and images again."""
        return self._image_operation(images.start_list, self.get_object(), user=request.user)

    @extend_schema(request=ImageRequestSerializer, responses=STARTED_OR_REFUSED)
    @action(detail=True, methods=["post"], url_path="images/pull")
    def images_pull(self, request, pk=None):
        """Pull an image on the node (through PANEL_IMAGE_MIRROR when set), with progress."""
        form = ImageRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        return self._image_operation(
            images.start_pull, self.get_object(), form.validated_data["image"], user=request.user
        )

    @extend_schema(request=LoadRequestSerializer, responses=STARTED_OR_REFUSED)
    @action(detail=True, methods=["post"], url_path="images/load")
    def images_load(self, request, pk=None):
        """Load an image archive from the package store on the node (its sha256 checked there)."""
        from django.shortcuts import get_object_or_404

        form = LoadRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        package = get_object_or_404(PackageFile, pk=form.validated_data["package"])
        node = self.get_object()
        return self._image_operation(
            images.start_load, node, package, panel_url=panel_url(request), user=request.user
        )

    @extend_schema(request=ImageRequestSerializer, responses=STARTED_OR_REFUSED)
    @action(detail=True, methods=["post"], url_path="images/remove")
    def images_remove(self, request, pk=None):
        """Remove an image from the node; refused (409) while a deployment there runs with it."""
        form = ImageRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        return self._image_operation(
            images.start_remove, self.get_object(), form.validated_data["image"], user=request.user
        )
