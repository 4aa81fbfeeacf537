"""One form per wizard step. The forms only turn what the browser sent into the API's shape; every rule
(names, ranges, NPUs held, what fits) is checked by panel.deployments.placement.planning, the code behind
POST /api/v1/deployments/, and its errors are put back onto these fields (see API_FIELD_TO_FORM_FIELD)."""

import shlex

from django import forms
from django.utils.translation import gettext_lazy as _

from panel.catalog.models import ModelArtifact
from panel.core.domain.choices import RoutingPolicy
from panel.core.domain.names import DEPLOYMENT_NAME, NameFormField
from panel.deployments.pages.autoscale_form import AutoscaleFields, RoleAutoscaleFields
from panel.deployments.pages.idle_form import IdleFields
from panel.deployments.pages.topology_form import NPUS_REQUIRED, TopologyFields
from workers.engine.launch.flags import ALLOWED_FLAGS, parse_flag_text

AUTO = ""
TENSOR_PARALLEL_CHOICES = [(AUTO, _("Automatic (all chosen NPUs)")), *[(n, str(n)) for n in (1, 2, 4, 8, 16)]]
DTYPE_CHOICES = [
    ("auto", _("Automatic (the checkpoint's, bfloat16 for float32)")),
    ("bfloat16", "bfloat16"),
    ("float16", "float16"),
    ("float32", "float32"),
]
QUANTIZATION_CHOICES = [
    (AUTO, _("None (or what the checkpoint says)")),
    ("ascend", _("ascend (msModelSlim W8A8)")),
]


class ModelStepForm(forms.Form):
    artifact = forms.ModelChoiceField(
        queryset=ModelArtifact.objects.none(),
        widget=forms.RadioSelect,
        label=_("Model copy"),
        error_messages={"required": _("Choose a model copy that is staged on a node.")},
    )
    name = NameFormField(
        DEPLOYMENT_NAME,
        required=False,
        help_text=_(
            "Letters, digits, - and _, at most 63; it names the engine process, its log and the live page. "
            "Left empty, it is made from the model name."
        ),
    )

    def __init__(self, *args, artifacts=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["artifact"].queryset = (
            artifacts if artifacts is not None else ModelArtifact.objects.none()
        )


class PlacementStepForm(TopologyFields):
    """The topology, and for one pool the NPU checkboxes. Values are "<node>:<logic id>", or "<node>:cpu"
    for a node without NPUs; prefill and decode pools name a node and a count per role instead."""

    npus = forms.MultipleChoiceField(
        label=_("NPUs"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": NPUS_REQUIRED},
    )

    def __init__(self, *args, choices=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["npus"].choices = list(choices)

    def nodes(self) -> list[dict]:
        """The API's "nodes" field: [{"node": name, "npus": [logic ids]}] in the order first chosen."""
        return nodes_from_choices(self.cleaned_data["npus"])


def nodes_from_choices(values) -> list[dict]:
    chosen: dict[str, list[int]] = {}
    for value in values:
        node, _sep, npu = str(value).rpartition(":")
        ids = chosen.setdefault(node, [])
        if npu != "cpu":
            ids.append(int(npu))
    return [{"node": node, "npus": sorted(ids)} for node, ids in chosen.items()]


def choices_from_nodes(nodes: list[dict]) -> list[str]:
    values: list[str] = []
    for entry in nodes or []:
        ids = entry.get("npus") or ["cpu"]
        values.extend(f"{entry['node']}:{npu}" for npu in ids)
    return values


class EngineStepForm(forms.Form):
    routing = forms.ChoiceField(
        label=_("Routing"),
        choices=RoutingPolicy.choices,
        initial=RoutingPolicy.LEAST_OUTSTANDING,
        required=False,
        help_text=_(
            "How the gateway picks a replica for each request: the one with the fewest requests in flight; "
            "the one whose prefix cache most likely holds the prompt (cache-aware, never far above the least "
            "loaded); or the same one per session (the X-Session-Id header, else the API key)."
        ),
    )
    runtime = forms.TypedChoiceField(
        label=_("Runtime"),
        choices=[
            ("process", _("Process (the node's serving venv)")),
            ("container", _("Container (an image)")),
        ],
        initial="process",
        required=False,
        empty_value="process",
        help_text=_(
            "A process runs vLLM from the venv the install made; a container runs it in an image (the "
            "official vllm-ascend images bring their own CANN, so the host needs only the driver)."
        ),
    )
    image = forms.CharField(
        label=_("Image"),
        required=False,
        max_length=255,
        widget=forms.TextInput(attrs={"list": "image-choices", "spellcheck": "false"}),
        help_text=_("For the container runtime: an image on the node, or an official one to pull first."),
    )
    tensor_parallel_size = forms.TypedChoiceField(
        label=_("Tensor parallel size (TP)"),
        choices=TENSOR_PARALLEL_CHOICES,
        coerce=int,
        empty_value=None,
        required=False,
        help_text=_(
            "How many NPUs share each layer. It must divide the attention heads and stay inside one node; "
            "TP x DP must equal the NPUs chosen."
        ),
    )
    data_parallel_size = forms.IntegerField(
        label=_("Data parallel size (DP)"),
        required=False,
        help_text=_("Independent copies of the model behind one endpoint; empty lets the planner decide."),
    )
    max_model_len = forms.IntegerField(
        label=_("Max model length (tokens)"),
        required=False,
        help_text=_(
            "Longest prompt plus answer one request may have. Longer means fewer requests fit the KV cache; "
            "empty uses the model's own limit."
        ),
    )
    dtype = forms.ChoiceField(
        label=_("Data type"),
        choices=DTYPE_CHOICES,
        initial="auto",
        help_text=_("Precision of weights and activations. 310P NPUs compute in float16 only."),
    )
    gpu_memory_utilization = forms.FloatField(
        label=_("Memory utilization"),
        initial=0.9,
        help_text=_(
            "Share of each NPU's memory vLLM may take for weights, workspace and KV cache "
            "(vLLM's --gpu-memory-utilization). Lower it when other processes use the NPU."
        ),
    )
    quantization = forms.TypedChoiceField(
        label=_("Quantization"),
        choices=QUANTIZATION_CHOICES,
        empty_value=None,
        required=False,
        help_text=_(
            "ascend serves msModelSlim W8A8 weights; quantized checkpoints are detected automatically."
        ),
    )
    enforce_eager = forms.BooleanField(
        label=_("Eager mode"),
        required=False,
        help_text=_("Skip graph capture: starts faster and uses less memory, decodes more slowly."),
    )
    served_model_name = forms.CharField(
        label=_("Served model name"),
        required=False,
        max_length=128,
        help_text=_('The "model" clients put in their requests; empty uses the deployment name.'),
    )
    port = forms.IntegerField(
        label=_("Port"),
        required=False,
        help_text=_("The engine's HTTP port on the node; empty picks a free one."),
    )
    mtp_tokens = forms.IntegerField(
        label=_("MTP draft tokens"),
        required=False,
        min_value=0,
        initial=0,
        help_text=_(
            "Multi-token prediction for models that carry MTP layers (DeepSeek-V3/R1): each decode step "
            "drafts this many tokens with the MTP layer. 0 turns it off; its weights and KV cache count in "
            "the plan."
        ),
    )
    env = forms.CharField(
        label=_("Environment overrides"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
        help_text=_(
            "One NAME=value per line, laid over the chip recipe shown in the plan (e.g. HCCL_BUFFSIZE=512). "
            "Variables that load code or libraries (LD_*, PYTHON*, PATH) are for admins."
        ),
    )
    extra_flags = forms.CharField(
        label=_("Extra vLLM flags"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
        help_text=_(
            "Advanced: more vLLM flags from the allowed list, e.g. "
            "--max-num-seqs 64 --enable-prefix-caching. Flags the plan sets (TP, dtype, port…) "
            "are refused here: change their fields instead."
        ),
    )

    def clean_extra_flags(self):
        text = self.cleaned_data["extra_flags"]
        try:
            return parse_flag_text(shlex.split(text))
        except ValueError as error:  # FlagError, or shlex's unbalanced quotes
            raise forms.ValidationError(str(error)) from None

    def clean_mtp_tokens(self):
        return self.cleaned_data["mtp_tokens"] or 0

    def clean_env(self):
        env = {}
        for number, line in enumerate(self.cleaned_data["env"].splitlines(), start=1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            name, equals, value = text.partition("=")
            if not equals or not name.strip():
                raise forms.ValidationError(_("Line %(number)d: write NAME=value.") % {"number": number})
            env[name.strip()] = value.strip()
        return env

    def api_data(self) -> dict:
        """The engine settings as the request takes them (routing is the deployment's, not the engine's)."""
        data = dict(self.cleaned_data)
        data.pop("routing", None)
        return data

    def clean_routing(self) -> str:
        return self.cleaned_data.get("routing") or RoutingPolicy.LEAST_OUTSTANDING


class WizardEngineForm(IdleFields, RoleAutoscaleFields, AutoscaleFields, EngineStepForm):
    """The wizard's engine step: the engine settings, and how the deployment (or each of its roles) scales
    and sleeps."""

    def api_data(self) -> dict:
        data = super().api_data()
        for name in [*AutoscaleFields.base_fields, *RoleAutoscaleFields.base_fields, *IdleFields.base_fields]:
            data.pop(name, None)
        return data


class EditForm(IdleFields, RoleAutoscaleFields, AutoscaleFields, TopologyFields, EngineStepForm):
    """A deployment page's Edit: the wizard's model copy, topology, NPUs and engine settings on one page, and
    its autoscaling (each role's, with roles) and sleep. Without NPU choices (a deployment with replicas,
    where each takes NPUs of its own) the NPUs stay as they are."""

    artifact = forms.ModelChoiceField(
        queryset=ModelArtifact.objects.none(), label=_("Model copy"), empty_label=None
    )
    npus = forms.MultipleChoiceField(
        label=_("NPUs"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": NPUS_REQUIRED},
    )

    def __init__(self, *args, artifacts, npu_choices=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["artifact"].queryset = artifacts
        self.fields["artifact"].label_from_instance = lambda copy: (
            f"{copy.model.name} · {copy.node.name}:{copy.path}"
        )
        if npu_choices:
            self.fields["npus"].choices = list(npu_choices)
        else:
            del self.fields["npus"]


def flags_as_text(extra: dict) -> str:
    """The text a user would type for `extra` (the inverse of clean_extra_flags), to refill the field."""
    parts = []
    for flag, value in (extra or {}).items():
        if value is True:
            parts.append(flag)
        elif value is not False:
            parts.extend([flag, shlex.quote(str(value))])
    return " ".join(parts)


def env_as_text(env: dict) -> str:
    """The text a user would type for `env` (the inverse of clean_env), to refill the field."""
    return "\n".join(f"{name}={value}" for name, value in (env or {}).items())


ALLOWED_FLAG_NAMES = sorted(ALLOWED_FLAGS)  # listed under the field, so nobody has to guess


class BenchmarkForm(forms.Form):
    """Renders the benchmark fields; the values are checked by the API's BenchmarkRequestSerializer."""

    concurrency = forms.MultipleChoiceField(
        label=_("Concurrency"),
        choices=[(n, str(n)) for n in (1, 4, 16, 64)],
        initial=["1", "4", "16", "64"],
        widget=forms.CheckboxSelectMultiple,
        help_text=_("Requests in flight at once; each level runs in turn."),
    )
    prompt_len = forms.IntegerField(
        label=_("Prompt length (tokens)"), initial=128, help_text=_("Tokens in each request's prompt.")
    )
    output_len = forms.IntegerField(
        label=_("Output length (tokens)"), initial=128, help_text=_("Tokens each request generates.")
    )
    requests = forms.IntegerField(
        label=_("Requests per level"),
        initial=64,
        help_text=_("How many requests each concurrency level sends."),
    )
