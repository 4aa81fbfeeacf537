from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.response import Response

from panel.accounts.roles import ADMIN, OPERATOR
from panel.core.domain.choices import NodeTransport
from panel.core.rest.api import PanelViewSet
from panel.core.rest.schema import ErrorSerializer
from panel.deployments.rollouts import node_actions
from panel.monitoring.api import views as monitoring_api
from panel.nodes import lifecycle
from panel.nodes.api.common import Conflict, panel_url, validation_error
from panel.nodes.api.health import NodeHealthMixin
from panel.nodes.api.images import NodeImagesMixin
from panel.nodes.api.serializers import (
    ConfirmHostKeySerializer,
    JoinTokenSerializer,
    NodeCreateSerializer,
    NodeSerializer,
    NodeSettingsSerializer,
)
from panel.nodes.filtersets import NodeFilterSet
from panel.nodes.models import Node
from panel.operations import node_operations
from panel.operations.api.serializers import OperationSerializer
from panel.operations.node_operations import start_install_agent, start_inventory

# Who may change the fleet (add, remove, reconfigure, trust a host key) versus who may act on a node.
ADMIN_ACTIONS = {
    "create",
    "destroy",
    "partial_update",
    "confirm_host_key",
    "install_agent",
    "join_token",
    "npu_health",
}


def _join_answer(pending: lifecycle.PendingAgent) -> dict:
    return {
        "name": pending.name,
        "transport": NodeTransport.AGENT,
        "join_token": pending.token,
        "expires": pending.expires,
        "join_command": pending.join_command,
    }


# What an action that starts an operation answers, and one the node's state can refuse.
STARTED = {202: OperationSerializer}
STARTED_OR_REFUSED = {**STARTED, 409: ErrorSerializer}


class NodeViewSet(
    NodeImagesMixin, NodeHealthMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, PanelViewSet
):
    """Nodes. Admins add (agent: a join command; SSH: stored, host key to confirm), reconfigure and remove
    them; operators cordon, uncordon and inventory; viewers read."""

    queryset = Node.objects.prefetch_related("npus")
    serializer_class = NodeSerializer
    filterset_class = NodeFilterSet
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    extra_query_params = {
        "destroy": {
            "force": OpenApiParameter(
                "force", bool, description="Remove it even while deployments or operations use it."
            )
        }
    }

    @property
    def write_role(self):
        return ADMIN if self.action in ADMIN_ACTIONS else OPERATOR

    def get_serializer_class(self):
        if self.action == "create":
            return NodeCreateSerializer
        if self.action == "partial_update":
            return NodeSettingsSerializer
        if self.action == "confirm_host_key":
            return ConfirmHostKeySerializer
        if self.action == "join_token":
            return JoinTokenSerializer
        return NodeSerializer

    def create(self, request):
        form = NodeCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        try:
            if data["transport"] == NodeTransport.AGENT:
                pending = lifecycle.add_agent_node(
                    name=data["name"],
                    panel_url=panel_url(request),
                    panel_host=request.get_host(),
                    user=request.user,
                )
                return Response(_join_answer(pending), status=status.HTTP_201_CREATED)
            node, fingerprint = lifecycle.add_ssh_node(
                name=data["name"],
                address=data["address"],
                port=data["port"],
                username=data["username"],
                client_key=data["client_key"],
                password=data["password"],
                labels=data["labels"],
                user=request.user,
            )
        except DjangoValidationError as error:
            raise validation_error(error) from error
        body = {**NodeSerializer(node).data, "host_key_fingerprint": fingerprint}
        return Response(body, status=status.HTTP_201_CREATED)

    def partial_update(self, request, pk=None):
        node = self.get_object()
        form = NodeSettingsSerializer(data=request.data, partial=True)
        form.is_valid(raise_exception=True)
        try:
            lifecycle.update_settings(node, **form.validated_data)
        except DjangoValidationError as error:
            raise validation_error(error) from error
        return Response(NodeSerializer(node).data)

    @extend_schema(responses={204: None, 409: ErrorSerializer})
    def destroy(self, request, pk=None):
        node = self.get_object()
        force = request.query_params.get("force", "").lower() in ("1", "true", "yes")
        try:
            node_actions.remove_node(node, force=force)
        except lifecycle.NodeActionRefused as error:
            raise Conflict(str(error)) from error
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _operation(self, start, *args, **kwargs):
        try:
            operation = start(*args, **kwargs)
        except lifecycle.NodeActionRefused as error:
            raise Conflict(str(error)) from error
        except DjangoValidationError as error:
            raise validation_error(error) from error
        return Response(OperationSerializer(operation).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses=STARTED_OR_REFUSED)
    @action(detail=True, methods=["post"])
    def inventory(self, request, pk=None):
        """Start an inventory operation on this node."""
        return self._operation(start_inventory, self.get_object(), user=request.user)

    @extend_schema(responses=STARTED_OR_REFUSED)
    @action(detail=True, methods=["post"], url_path="confirm-host-key")
    def confirm_host_key(self, request, pk=None):
        """Pin the SSH host key fingerprint the admin confirmed (checked against the host again), then
        inventory the node."""
        form = ConfirmHostKeySerializer(data=request.data)
        form.is_valid(raise_exception=True)
        node = self.get_object()
        return self._operation(
            node_operations.confirm_host_key, node, form.validated_data["fingerprint"], request.user
        )

    @extend_schema(request=None, responses=STARTED_OR_REFUSED)
    @action(detail=True, methods=["post"], url_path="install-agent")
    def install_agent(self, request, pk=None):
        """Install the agent onto this SSH node over SSH; it then registers and runs its own tasks."""
        return self._operation(
            start_install_agent,
            self.get_object(),
            panel_url=panel_url(request),
            user=request.user,
        )

    @extend_schema(responses={201: None, 409: ErrorSerializer})
    @action(detail=True, methods=["post"], url_path="join-token")
    def join_token(self, request, pk=None):
        """A new join command for this agent node (any pending one stops working). Trading it in rotates the
        node's credential, so `rotate_credential` must be true."""
        form = JoinTokenSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            pending = lifecycle.rejoin_agent_node(
                self.get_object(),
                rotate_credential=form.validated_data["rotate_credential"],
                panel_url=panel_url(request),
                user=request.user,
            )
        except lifecycle.NodeActionRefused as error:
            raise Conflict(str(error)) from error
        except DjangoValidationError as error:
            raise validation_error(error) from error
        return Response(_join_answer(pending), status=status.HTTP_201_CREATED)

    @extend_schema(request=None)
    @action(detail=True, methods=["post"])
    def cordon(self, request, pk=None):
        """No new deployments on this node; what runs there keeps running."""
        node = lifecycle.set_cordoned(self.get_object(), True)
        return Response(NodeSerializer(node).data)

    @extend_schema(request=None, responses=NodeSerializer)
    @action(detail=True, methods=["post"])
    def drain(self, request, pk=None):
        """Cordon this node and stop its deployments, so an install that restarts its NPU driver or the
        host may run once they have stopped."""
        node = self.get_object()
        node_actions.drain(node, user=request.user)
        node.refresh_from_db()
        return Response(NodeSerializer(node).data)

    @extend_schema(request=None)
    @action(detail=True, methods=["post"])
    def uncordon(self, request, pk=None):
        node = lifecycle.set_cordoned(self.get_object(), False)
        return Response(NodeSerializer(node).data)

    @extend_schema(
        parameters=monitoring_api.HISTORY_PARAMETERS, responses=monitoring_api.MetricHistorySerializer
    )
    @action(detail=True, methods=["get"])
    def metrics(self, request, pk=None):
        """Metric history of this node as columns for uPlot (see the response schema for series names)."""
        return monitoring_api.history_response(self.get_object(), request)

    @extend_schema(
        request=monitoring_api.SetMetricsIntervalSerializer,
        responses={202: monitoring_api.MetricsIntervalSetSerializer},
    )
    @action(detail=True, methods=["post"], url_path="metrics-interval")
    def metrics_interval(self, request, pk=None):
        """Set how often this node's agent samples its NPUs (seconds); the agent changes it at once."""
        return monitoring_api.set_interval_response(self.get_object(), request)
