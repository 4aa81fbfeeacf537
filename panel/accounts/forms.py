from django import forms
from django.utils.translation import gettext_lazy as _

from panel.accounts.models import SCOPE_ADMIN, SCOPE_DEPLOY, SCOPE_INFERENCE, ApiToken
from panel.accounts.services import TokenGrant
from panel.core.domain.names import TOKEN_NAME, NameFormField
from workers.engine.launch.command import SERVED_NAME_PATTERN

LIFETIMES = (("", _("Never")), ("30", _("in 30 days")), ("90", _("in 90 days")), ("365", _("in a year")))
SCOPE_CHOICES = (
    (SCOPE_INFERENCE, _("inference: the /v1 gateway (OpenAI API)")),
    (SCOPE_DEPLOY, _("deploy: the panel's API and CLI, without users and tokens")),
    (SCOPE_ADMIN, _("admin: everything your role allows")),
)


class ApiTokenForm(forms.Form):
    name = NameFormField(TOKEN_NAME, label=_("Name"))
    lifetime = forms.ChoiceField(label=_("Expires"), choices=LIFETIMES, required=False)
    scopes = forms.MultipleChoiceField(
        label=_("Scopes"), choices=SCOPE_CHOICES, widget=forms.CheckboxSelectMultiple, required=False
    )
    models = forms.CharField(
        label=_("Models"),
        required=False,
        max_length=2000,
        help_text=_("Served model names this key may call, separated by commas; empty: every model."),
    )
    requests_per_minute = forms.IntegerField(label=_("Requests per minute"), min_value=1, required=False)
    tokens_per_minute = forms.IntegerField(label=_("Tokens per minute"), min_value=1, required=False)

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user

    def clean_name(self):
        name = self.cleaned_data["name"].strip()
        if ApiToken.objects.filter(user=self.user, name=name).exists():
            raise forms.ValidationError(_("You already have a token named “%(name)s”.") % {"name": name})
        return name

    def clean_models(self):
        names = [part.strip() for part in self.cleaned_data["models"].split(",") if part.strip()]
        bad = [name for name in names if not SERVED_NAME_PATTERN.fullmatch(name)]
        if bad:
            raise forms.ValidationError(_("Not a served model name: %(names)s.") % {"names": ", ".join(bad)})
        return names

    def clean(self):
        cleaned = super().clean()
        # A form from before scopes (no scope boxes at all) still gets the owner's full rights.
        if "scopes-shown" in self.data and not cleaned.get("scopes"):
            self.add_error("scopes", _("Choose at least one scope."))
        return cleaned

    def grant(self) -> TokenGrant:
        data = self.cleaned_data
        return TokenGrant(
            scopes=data["scopes"] or [SCOPE_ADMIN],
            allowed_models=data["models"],
            requests_per_minute=data.get("requests_per_minute"),
            tokens_per_minute=data.get("tokens_per_minute"),
        )
