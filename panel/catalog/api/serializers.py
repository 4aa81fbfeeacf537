from rest_framework import serializers

from panel.catalog.models import FactsSource, Model, ModelArtifact
from panel.catalog.planning import fit_on_typical_node
from panel.core.domain.choices import ModelSource
from workers.engine.planner.plan_hardware import HARDWARE
from workers.engine.planner.plan_layout import MAX_NODES_SEARCHED


class ModelArtifactSerializer(serializers.ModelSerializer):
    node = serializers.SlugRelatedField(slug_field="name", read_only=True)
    model = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = ModelArtifact
        fields = [
            "id",
            "model",
            "node",
            "path",
            "format",
            "size_bytes",
            "ready",
            "facts",
            "made_from",
            "verification",
            "created",
        ]
        read_only_fields = fields


class ModelSerializer(serializers.ModelSerializer):
    artifacts = ModelArtifactSerializer(many=True, read_only=True)
    fit_on_typical_node = serializers.SerializerMethodField()
    # "" until the model's facts are known
    facts_source = serializers.ChoiceField(choices=FactsSource.choices, allow_blank=True, read_only=True)

    class Meta:
        model = Model
        fields = [
            "id",
            "name",
            "source",
            "repo_id",
            "revision",
            "description",
            "facts",
            "facts_source",
            "catalog_id",
            "artifacts",
            "fit_on_typical_node",
        ]
        read_only_fields = ["facts", "facts_source", "catalog_id", "artifacts"]

    def get_fit_on_typical_node(self, model) -> dict | None:
        return fit_on_typical_node(model.facts)


class RegisteredModelSerializer(ModelSerializer):
    operation = serializers.UUIDField(
        read_only=True, allow_null=True, help_text="The inspection started, if any."
    )

    class Meta(ModelSerializer.Meta):
        fields = [*ModelSerializer.Meta.fields, "operation"]


class RegisterSerializer(serializers.Serializer):
    source = serializers.ChoiceField(choices=ModelSource.choices)
    repo_id = serializers.CharField(required=False, allow_blank=True, default="")
    revision = serializers.CharField(required=False, allow_blank=True, default="")
    node = serializers.CharField(required=False, allow_blank=True, default="", help_text="node name")
    path = serializers.CharField(required=False, allow_blank=True, default="")
    name = serializers.CharField(required=False, allow_blank=True, default="")
    description = serializers.CharField(required=False, allow_blank=True, default="")


class DownloadSerializer(serializers.Serializer):
    node = serializers.CharField()
    path = serializers.CharField(required=False, allow_blank=True, default="")


class ConvertSerializer(serializers.Serializer):
    target = serializers.ChoiceField(choices=["w8a8_dynamic", "bfloat16", "float16"])
    backend = serializers.ChoiceField(choices=["builtin", "msmodelslim"], default="builtin")
    device = serializers.ChoiceField(choices=["npu", "cpu"], default="npu")
    path = serializers.CharField(required=False, allow_blank=True, default="")
    model_type = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        help_text="msModelSlim's --model_type, e.g. Qwen2.5-7B-Instruct; empty: the repository's name.",
    )


class ModelSpecSerializer(serializers.Serializer):
    """PUT /api/v1/models/{name}/: what the model is and, for a folder, where (the name is the URL's)."""

    source = serializers.ChoiceField(choices=ModelSource.choices)
    repo_id = serializers.CharField(required=False, allow_blank=True, default="")
    revision = serializers.CharField(required=False, allow_blank=True, default="")
    node = serializers.CharField(required=False, allow_blank=True, default="", help_text="node name")
    path = serializers.CharField(required=False, allow_blank=True, default="")
    description = serializers.CharField(required=False, allow_blank=True, default="")


class AppliedModelSerializer(serializers.Serializer):
    result = serializers.ChoiceField(["created", "unchanged", "updated"])
    changed = serializers.ListField(child=serializers.CharField(), required=False)
    model = ModelSerializer()
    operation = serializers.UUIDField(allow_null=True, help_text="The inspection started, if any.")


class DeletedModelSerializer(serializers.Serializer):
    deleted = serializers.BooleanField()
    name = serializers.CharField()
    copies_forgotten = serializers.ListField(
        child=serializers.CharField(), help_text="Copies whose records went; their folders stay on the nodes."
    )


HARDWARE_CHOICES = [(key, shape.title) for key, shape in HARDWARE.items()]


class AdviceQuerySerializer(serializers.Serializer):
    """The question the serving advice answers: the model on `nodes` nodes of a kind, for these lengths."""

    hardware = serializers.ChoiceField(choices=HARDWARE_CHOICES, default="a2", help_text="Kind of node.")
    node = serializers.ListField(
        child=serializers.CharField(max_length=200),
        required=False,
        max_length=MAX_NODES_SEARCHED,
        help_text="Plan on these nodes' free NPUs instead of a kind of node (repeat it for several).",
    )
    nodes = serializers.IntegerField(min_value=1, max_value=MAX_NODES_SEARCHED, default=1)
    prompt_tokens = serializers.IntegerField(
        min_value=1, max_value=1_048_576, required=False, help_text="Expected prompt length: plans P:D."
    )
    output_tokens = serializers.IntegerField(
        min_value=1, max_value=1_048_576, required=False, help_text="Expected output length: plans P:D."
    )
    quantization = serializers.ChoiceField(
        choices=[("", "as the weights are"), ("ascend", "W8A8")], default="", allow_blank=True
    )
    vllm_ascend = serializers.RegexField(
        r"^[0-9][0-9a-z.+-]{0,39}$", required=False, help_text="Installed vllm-ascend: EPLB per role."
    )

    def validate(self, attrs):
        if bool(attrs.get("prompt_tokens")) != bool(attrs.get("output_tokens")):
            raise serializers.ValidationError(
                {"output_tokens": ["Give prompt_tokens and output_tokens together."]}
            )
        return attrs


class RecipeQuerySerializer(serializers.Serializer):
    search = serializers.CharField(
        required=False, allow_blank=True, max_length=200, help_text="Words every recipe listed holds."
    )
    hardware = serializers.ChoiceField(choices=HARDWARE_CHOICES, required=False, allow_blank=True)
