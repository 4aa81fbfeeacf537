"""The notifications page's forms: a channel (its secret typed in, sealed, never shown again), a route and
a silence."""

from django import forms
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from panel.core.infra import secrets
from panel.monitoring.models import AlertKind, AlertSeverity, NotificationChannel, Route, Silence


class ChannelForm(forms.ModelForm):
    url = forms.URLField(label=_("URL"), required=False, max_length=500, assume_scheme="https")
    secret = forms.CharField(
        label=_("Secret"),
        required=False,
        widget=forms.PasswordInput,
        help_text=_(
            "The bot's signing secret, the SMTP password or the webhook's bearer token. Stored sealed."
        ),
    )

    class Meta:
        model = NotificationChannel
        fields = [
            "name",
            "kind",
            "url",
            "smtp_host",
            "smtp_port",
            "smtp_security",
            "smtp_user",
            "email_from",
            "email_to",
        ]
        labels = {"email_from": _("From address"), "email_to": _("To addresses")}
        help_texts = {"email_to": _("Addresses, comma-separated.")}  # fmt: skip

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Hidden (and so not sent) unless the kind is e-mail: the model's defaults stand in.
        for name in ("smtp_port", "smtp_security"):
            self.fields[name].required = False

    def clean(self):
        cleaned = super().clean()
        cleaned["smtp_port"] = (
            cleaned.get("smtp_port") or NotificationChannel._meta.get_field("smtp_port").default
        )
        cleaned["smtp_security"] = (
            cleaned.get("smtp_security") or NotificationChannel._meta.get_field("smtp_security").default
        )
        fields = ("kind", "url", "smtp_host", "email_to")
        for field, why in NotificationChannel(**{f: cleaned.get(f) or "" for f in fields}).missing().items():
            self.add_error(field, why)
        return cleaned

    def save(self, commit=True):
        channel = super().save(commit=False)
        plain = self.cleaned_data.get("secret") or ""
        channel.secret = secrets.encrypt(plain) if plain else ""
        if commit:
            channel.save()
        return channel


def alert_kinds_field() -> forms.MultipleChoiceField:
    """The alert kinds a route or a silence applies to (none chosen: every kind)."""
    return forms.MultipleChoiceField(
        label=_("Kinds"),
        choices=AlertKind.choices,
        required=False,
        widget=forms.SelectMultiple,
        help_text=_("None chosen: every kind."),
    )


class RouteForm(forms.ModelForm):
    severities = forms.MultipleChoiceField(
        label=_("Severities"),
        choices=AlertSeverity.choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=_("None ticked: every severity."),
    )
    kinds = alert_kinds_field()

    class Meta:
        model = Route
        fields = ["name", "channel", "severities", "kinds", "node_label"]
        help_texts = {"node_label": _("key=value: only alerts of nodes with this label. Empty: any.")}

    def clean_node_label(self):
        value = self.cleaned_data["node_label"].strip()
        if value and "=" not in value:
            raise forms.ValidationError(_("Write the label as key=value."))
        return value


class SilenceForm(forms.ModelForm):
    kinds = alert_kinds_field()
    ends_at = forms.DateTimeField(
        label=_("Ends"), widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )

    class Meta:
        model = Silence
        fields = ["kinds", "node", "deployment", "ends_at", "reason"]

    def clean_ends_at(self):
        value = self.cleaned_data["ends_at"]
        if value <= timezone.now():
            raise forms.ValidationError(_("A silence ends in the future, after it starts."))
        return value
