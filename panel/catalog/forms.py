from django import forms
from django.utils.translation import gettext_lazy as _

from panel.catalog.copies import BACKENDS, CONVERSION_TARGETS
from panel.core.domain.choices import ModelSource, NodeTransport
from panel.nodes.models import Node
from workers.models.commands import ATC_INPUT_FORMATS


def agent_nodes():
    return Node.objects.filter(transport=NodeTransport.AGENT)


class RegisterModelForm(forms.Form):
    source = forms.ChoiceField(label=_("Source"), choices=ModelSource.choices, initial=ModelSource.MODELSCOPE)
    repo_id = forms.CharField(
        label=_("Repository id"), required=False, help_text=_("owner/name on ModelScope or HuggingFace.")
    )
    revision = forms.CharField(label=_("Revision"), required=False, help_text=_("Empty: master / main."))
    node = forms.ModelChoiceField(
        label=_("Node"),
        queryset=agent_nodes(),
        required=False,
        help_text=_("For a path: the node that has it. For a hub id: a node whose agent reads the hub."),
    )
    path = forms.CharField(
        label=_("Path on the node"), required=False, help_text=_("Folder with config.json, or an .onnx file.")
    )
    name = forms.CharField(
        label=_("Name"), required=False, help_text=_("Empty: from the repository id or folder.")
    )
    description = forms.CharField(
        label=_("Description"), required=False, widget=forms.Textarea(attrs={"rows": 2})
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["node"].queryset = agent_nodes()


class DownloadForm(forms.Form):
    node = forms.ModelChoiceField(label=_("Node"), queryset=agent_nodes())
    path = forms.CharField(
        label=_("Folder"), required=False, help_text=_("Empty: a folder named after the model.")
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["node"].queryset = agent_nodes()


class ConvertForm(forms.Form):
    target = forms.ChoiceField(
        label=_("Into"),
        choices=[(t, {"w8a8_dynamic": "W8A8_DYNAMIC"}.get(t, t)) for t in CONVERSION_TARGETS],
    )
    backend = forms.ChoiceField(
        label=_("With"),
        choices=[(b, {"builtin": _("built-in (CPU)"), "msmodelslim": "msModelSlim"}[b]) for b in BACKENDS],
    )
    device = forms.ChoiceField(
        label=_("msModelSlim device"), choices=[("npu", "NPU"), ("cpu", "CPU")], required=False
    )
    model_type = forms.CharField(
        label=_("msModelSlim model type"),
        required=False,
        help_text=_("e.g. Qwen2.5-7B-Instruct. Empty: the model's repository name."),
    )
    path = forms.CharField(label=_("Folder"), required=False)


class AtcForm(forms.Form):
    input_shape = forms.CharField(
        label=_("Input shape"), required=False, help_text=_("e.g. images:1,3,640,640")
    )
    input_format = forms.ChoiceField(label=_("Input format"), choices=[(f, f) for f in ATC_INPUT_FORMATS])
    soc_version = forms.CharField(
        label=_("SoC version"), required=False, help_text=_("Empty: from the node's NPUs.")
    )
    path = forms.CharField(label=_("Folder"), required=False)


class CopyForm(forms.Form):
    target_node = forms.ModelChoiceField(label=_("To node"), queryset=agent_nodes())
    target_user = forms.CharField(label=_("SSH user on the target"), initial="root")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["target_node"].queryset = agent_nodes()
