from django import forms
from django.utils.translation import gettext_lazy as _

from panel.core.domain.choices import NodeTransport


class NodeAddForm(forms.Form):
    """Add a node: the fields under "SSH" matter only when the transport is SSH."""

    transport = forms.ChoiceField(
        label=_("How the panel reaches it"),
        choices=NodeTransport.choices,
        initial=NodeTransport.AGENT,
        widget=forms.RadioSelect,
    )
    name = forms.SlugField(
        label=_("Name"),
        max_length=63,
        help_text=_("Letters, digits, - and _; shown everywhere in the panel."),
    )
    address = forms.CharField(label=_("Address"), max_length=255, required=False)
    port = forms.IntegerField(label=_("SSH port"), min_value=1, max_value=65535, initial=22, required=False)
    username = forms.CharField(label=_("SSH user"), max_length=64, required=False, initial="root")
    client_key = forms.CharField(
        label=_("Private key"),
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 5, "class": "mono", "autocomplete": "off"}),
        help_text=_("Unencrypted OpenSSH or PEM private key; stored encrypted."),
    )
    password = forms.CharField(
        label=_("Password"),
        required=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        help_text=_("Instead of a key; stored encrypted."),
    )

    def clean(self):
        data = super().clean()
        if data.get("transport") == NodeTransport.SSH:
            if not data.get("address"):
                self.add_error("address", _("An SSH node needs the address the panel connects to."))
            if not data.get("username"):
                self.add_error("username", _("An SSH node needs the user the panel logs in as."))
            if not data.get("client_key") and not data.get("password"):
                self.add_error("client_key", _("Give a private key or a password to log in with."))
            data["port"] = data.get("port") or 22
        return data


class NodeSettingsForm(forms.Form):
    labels = forms.CharField(
        label=_("Labels"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "class": "mono"}),
        help_text=_("One key=value per line."),
    )
    ssh_env = forms.CharField(
        label=_("Environment for SSH commands"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "class": "mono"}),
        help_text=_("One NAME=value per line, e.g. PATH=/usr/local/sbin:/usr/bin (SSH nodes only)."),
    )
    models_roots = forms.CharField(
        label=_("Models roots"),
        widget=forms.Textarea(attrs={"rows": 2, "class": "mono"}),
        help_text=_(
            "One absolute folder per line, e.g. /data/models. Model folders, copies and deployments on this "
            "node must lie in one; the agent also keeps to its own ASCEND_PANEL_MODELS_ROOT."
        ),
    )
    ssh_host_root = forms.CharField(label=_("Host root"), max_length=255, initial="/")
    ssh_ascend_root = forms.CharField(label=_("Ascend root"), max_length=255, initial="/usr/local/Ascend")

    @staticmethod
    def _pairs(text: str, field: str) -> dict:
        pairs = {}
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            key, sep, value = line.partition("=")
            if not sep or not key.strip():
                raise forms.ValidationError(
                    _("Line %(number)s is not key=value: %(line)s") % {"number": number, "line": line},
                    code=field,
                )
            pairs[key.strip()] = value.strip()
        return pairs

    def clean_labels(self):
        return self._pairs(self.cleaned_data["labels"], "labels")

    def clean_ssh_env(self):
        return self._pairs(self.cleaned_data["ssh_env"], "ssh_env")

    def clean_models_roots(self):
        return self.cleaned_data["models_roots"].splitlines()

    @staticmethod
    def initial_for(node) -> dict:
        def lines(mapping):
            return "\n".join(f"{k}={v}" for k, v in mapping.items())

        return {
            "labels": lines(node.labels or {}),
            "ssh_env": lines(node.ssh_env or {}),
            "models_roots": "\n".join(node.models_roots or []),
            "ssh_host_root": node.ssh_host_root,
            "ssh_ascend_root": node.ssh_ascend_root,
        }
