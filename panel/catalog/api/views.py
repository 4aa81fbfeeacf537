from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.response import Response

from panel.catalog import copies, services
from panel.catalog.api.offer import offered
from panel.catalog.api.serializers import (
    AdviceQuerySerializer,
    AppliedModelSerializer,
    ConvertSerializer,
    DeletedModelSerializer,
    DownloadSerializer,
    ModelArtifactSerializer,
    ModelSerializer,
    ModelSpecSerializer,
    RecipeQuerySerializer,
    RegisteredModelSerializer,
    RegisterSerializer,
)
from panel.catalog.models import Model, ModelArtifact
from panel.catalog.planning import advice, hardware_rows
from panel.core.rest.api import PanelViewSet, ReadOnlyPanelViewSet, StrictRequestMixin
from panel.core.rest.idempotency import idempotent
from panel.core.rest.schema import ErrorSerializer
from panel.nodes.models import Node
from panel.operations.api.serializers import OperationSerializer
from workers.engine.launch.recipes import search_serving


def _node(request, name):
    if not name:
        return None
    node = Node.objects.visible_to(request.user).filter(name=name).first()
    if node is None:
        raise ValidationError({"node": [f"No node named {name!r}."]})
    return node


def _started(operation):
    return Response(OperationSerializer(operation).data, status=status.HTTP_202_ACCEPTED)


def _call(function, *args, **kwargs):
    try:
        return function(*args, **kwargs)
    except DjangoValidationError as error:
        raise ValidationError(error.message_dict) from None


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


class ModelViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PanelViewSet):
    queryset = Model.objects.prefetch_related("artifacts__node", "artifacts__model")
    serializer_class = ModelSerializer
    http_method_names = ["get", "post", "put", "delete", "head", "options"]

    @extend_schema(
        operation_id="models_apply",
        request=ModelSpecSerializer,
        responses={201: AppliedModelSerializer, 200: AppliedModelSerializer},
        description="Register the model called {id} (its name), or bring its description, revision and hub "
        "id up to date: 201 created, 200 unchanged or updated. Never makes a `-2` twin.",
    )
    @idempotent
    def update(self, request, pk=None):
        data = ModelSpecSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        existing = Model.objects.visible_to(request.user).filter(name=pk).first()
        if existing is None:
            values["node"] = _node(request, values["node"])
            model, operation = _call(services.register_model, user=request.user, name=pk, **values)
            body = {"result": "created", "model": ModelSerializer(model).data}
            body["operation"] = str(operation.id) if operation else None
            return Response(body, status=status.HTTP_201_CREATED)
        changed = _call(services.update_model, existing, **values)
        return Response(
            {
                "result": "updated" if changed else "unchanged",
                "changed": changed,
                "model": ModelSerializer(existing).data,
                "operation": None,
            }
        )

    @extend_schema(responses={200: DeletedModelSerializer, 409: ErrorSerializer})
    def destroy(self, request, pk=None):
        """Remove the model from the catalog (refused while a deployment uses it). Its copies' records go
        with it; their folders stay on the nodes (delete a copy first to remove its files)."""
        model = self.get_object()
        try:
            forgotten = services.delete_model(model)
        except services.ModelInUse as error:
            raise Conflict(str(error)) from None
        return Response({"deleted": True, "name": model.name, "copies_forgotten": forgotten})

    @extend_schema(request=RegisterSerializer, responses={201: RegisteredModelSerializer})
    @idempotent(creates=Model.objects.all())
    def create(self, request):
        """Register a model from a hub id or a path on a node; an inspection starts when it can."""
        data = RegisterSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = {**data.validated_data, "node": _node(request, data.validated_data["node"])}
        model, operation = _call(services.register_model, user=request.user, **values)
        body = ModelSerializer(model).data
        body["operation"] = str(operation.id) if operation else None
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=DownloadSerializer, responses={202: OperationSerializer})
    @action(detail=True, methods=["post"])
    def download(self, request, pk=None):
        data = DownloadSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        node = _node(request, data.validated_data["node"])
        return _started(
            _call(services.start_download, self.get_object(), node, request.user, data.validated_data["path"])
        )

    @extend_schema(
        parameters=[AdviceQuerySerializer],
        responses={200: OpenApiTypes.OBJECT},
        description="The planner on `nodes` nodes of a kind (a2, a3, 300i-duo), or on the free NPUs of the "
        "nodes named by `node`: its plan; when the model "
        "does not fit, what would (proposals: more nodes with TP x DP x EP, W8A8, another kind of node, each "
        "with its memory figures); with prompt_tokens and output_tokens the prefill/decode split (`pd`: P:D "
        "counts, per-role TP / DP / EP and EPLB, estimates, and the reasons, also when it is not worth it); "
        "and the serving recipes written for the model. Reasons are {code, level, message, params}.",
    )
    @action(detail=True, methods=["get"])
    def advice(self, request, pk=None):
        query = AdviceQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        model = self.get_object()
        asked = dict(query.validated_data)
        names = asked.pop("node", None)
        offer = offered(request.user, names) if names else None
        answer = advice(model.facts or {}, model.name, offer=offer, **asked)
        if answer is None:
            raise ValidationError({"model": ["This model has no facts to plan with yet: inspect it first."]})
        return Response(answer)


class RecipeViewSet(StrictRequestMixin, viewsets.ViewSet):
    """Serving recipes per kind of node (A2, A3, 300I Duo): the quantization, topology, flags and env the
    sources run a model with, searched by words (`search`) and kind (`hardware`); with the kinds' figures."""

    @extend_schema(parameters=[RecipeQuerySerializer], responses={200: OpenApiTypes.OBJECT})
    def list(self, request):
        query = RecipeQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        found = search_serving(
            query.validated_data.get("search", ""), query.validated_data.get("hardware", "")
        )
        return Response({"hardware": hardware_rows(), "count": len(found), "results": list(found)})


class ModelArtifactViewSet(mixins.DestroyModelMixin, ReadOnlyPanelViewSet):
    queryset = ModelArtifact.objects.select_related("node", "model")
    lookup_name_field = None  # copies have no name of their own
    serializer_class = ModelArtifactSerializer

    @extend_schema(responses={202: OperationSerializer, 400: ErrorSerializer, 409: ErrorSerializer})
    def destroy(self, request, pk=None):
        """Delete the copy's folder on its node (409 while a deployment uses it); answers 202."""
        try:
            operation = copies.start_artifact_delete(self.get_object(), request.user)
        except copies.CopyInUse as error:
            raise Conflict(" ".join(error.message_dict["artifact"])) from None
        except DjangoValidationError as error:
            raise ValidationError(error.message_dict) from None
        return _started(operation)

    @extend_schema(request=ConvertSerializer, responses={202: OperationSerializer})
    @action(detail=True, methods=["post"])
    def convert(self, request, pk=None):
        data = ConvertSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        return _started(
            _call(
                copies.start_conversion,
                self.get_object(),
                v["target"],
                request.user,
                v["backend"],
                v["device"],
                v["path"],
                model_type=v["model_type"],
            )
        )

    @extend_schema(request=None, responses={202: OperationSerializer})
    @action(detail=True, methods=["post"])
    def inspect(self, request, pk=None):
        return _started(_call(copies.start_inspection, self.get_object(), request.user))
