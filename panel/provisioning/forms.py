from django import forms
from django.utils.translation import gettext_lazy as _

from panel.provisioning.profiles import profile_choices
from panel.provisioning.services import PIP_AUTO, PIP_INDEX, PIP_WHEELHOUSE


class ProfileForm(forms.Form):
    profile = forms.ChoiceField(label=_("Profile"), choices=profile_choices)
    pip_source = forms.ChoiceField(
        label=_("Python packages from"),
        choices=[
            (PIP_AUTO, _("Uploaded wheels if any, else the pip index")),
            (PIP_WHEELHOUSE, _("Uploaded wheels (wheelhouse)")),
            (PIP_INDEX, _("The configured pip index")),
        ],
        initial=PIP_AUTO,
    )
    allow_reboot = forms.BooleanField(
        label=_("Reboot the node if the driver asks for it"), required=False, initial=False
    )


class UploadForm(forms.Form):
    file = forms.FileField(label=_("Package (.run) or wheel (.whl)"))
