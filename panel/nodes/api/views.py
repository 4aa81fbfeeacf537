from rest_framework import status
from rest_framework.decorators import action
from rest_framework.response import Response

from panel.core.api import ReadOnlyPanelViewSet
from panel.nodes.api.serializers import NodeSerializer
from panel.nodes.filtersets import NodeFilterSet
from panel.nodes.models import Node
from panel.operations.api.serializers import OperationSerializer


class NodeViewSet(ReadOnlyPanelViewSet):
    queryset = Node.objects.prefetch_related("npus")
    serializer_class = NodeSerializer
    filterset_class = NodeFilterSet

    @action(detail=True, methods=["post"])
    def inventory(self, request, pk=None):
        """Start an inventory operation on this node."""
        from panel.nodes.operations import start_inventory

        operation = start_inventory(self.get_object(), user=request.user)
        return Response(OperationSerializer(operation).data, status=status.HTTP_202_ACCEPTED)
