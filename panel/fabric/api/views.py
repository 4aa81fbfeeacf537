from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from panel.core.rest.api import PanelViewSet
from panel.fabric import services
from panel.fabric.api.serializers import (
    FabricCheckSerializer,
    NodeFabricSerializer,
    StartFabricCheckSerializer,
)
from panel.fabric.models import FabricCheck, NodeFabric
from panel.nodes.models import Node


def _nodes_with_npus(names: list[str], user) -> list[Node]:
    nodes = {node.name: node for node in Node.objects.visible_to(user).filter(name__in=names)}
    missing = sorted(set(names) - set(nodes))
    if missing:
        raise ValidationError({"nodes": [f"No node named {', '.join(missing)}."]})
    without = sorted(name for name, node in nodes.items() if not services.devices_of(node))
    if without:
        raise ValidationError(
            {"nodes": [f"{', '.join(without)} has no NPUs with logic ids: run an inventory."]}
        )
    return [nodes[name] for name in dict.fromkeys(names)]


class FabricCheckViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PanelViewSet):
    """Checks of the NPU network (HCCL fabric): each node's NPU NICs, NPU-to-NPU pings between the nodes,
    TLS alike everywhere and the HCCL interface. POST starts one on some nodes; it runs as one agent
    operation per node and is `running` until their verdict is in."""

    queryset = FabricCheck.objects.select_related("created_by")
    serializer_class = FabricCheckSerializer

    @extend_schema(request=StartFabricCheckSerializer, responses={202: FabricCheckSerializer})
    def create(self, request):
        data = StartFabricCheckSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        nodes = _nodes_with_npus(data.validated_data["nodes"], request.user)
        check = services.start_check(nodes, user=request.user)
        return Response(FabricCheckSerializer(check).data, status=status.HTTP_202_ACCEPTED)


class NodeFabricViewSet(PanelViewSet):
    """A node's NPU network as its last check saw it: a row per NPU (ip, link, health, tls, pings, status,
    problems), its HCCL interface and the checklist lines about it. POST .../check/ checks it alone."""

    queryset = Node.objects.all()
    lookup_field = "name"
    serializer_class = NodeFabricSerializer

    def retrieve(self, request, name=None):
        fabric = get_object_or_404(NodeFabric.objects.select_related("node"), node=self.get_object())
        return Response(NodeFabricSerializer(fabric).data)

    @extend_schema(request=None, responses={202: FabricCheckSerializer})
    @action(detail=True, methods=["post"])
    def check(self, request, name=None):
        nodes = _nodes_with_npus([self.get_object().name], request.user)
        check = services.start_check(nodes, user=request.user)
        return Response(FabricCheckSerializer(check).data, status=status.HTTP_202_ACCEPTED)
