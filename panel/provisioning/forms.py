from django import forms
from django.utils.translation import gettext_lazy as _

from panel.provisioning.fit import profile_choices_for
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
    # The profile of the preflight shown on the page: Install refuses another one, so what installs is
    # what was checked.
    checked_profile = forms.CharField(required=False, widget=forms.HiddenInput)

    def clean(self):
        data = super().clean()
        checked, profile = data.get("checked_profile"), data.get("profile")
        if self.installing and checked and profile and checked != profile:
            self.add_error(
                "profile",
                _(
                    "The preflight on this page checked profile %(checked)s, not %(profile)s. Choose "
                    "%(checked)s to install it, or run the preflight for %(profile)s first."
                )
                % {"checked": checked, "profile": profile},
            )
        return data

    def __init__(self, *args, installing: bool = False, node=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.installing = installing
        if node is not None:
            # Only the profiles that fit the node's chips and driver are offered; another one posted is
            # refused by the service, which names the chip or the driver.
            self.fields["profile"].widget.choices = profile_choices_for(node)

    def overrides(self) -> dict[str, str]:
        """The reasons typed next to failed preflight rows (`override-<check>`), blank ones left out."""
        prefix = "override-"
        return {
            key[len(prefix) :]: value.strip()
            for key, value in self.data.items()
            if key.startswith(prefix) and value.strip()
        }


class UploadForm(forms.Form):
    file = forms.FileField(label=_("Package (.run) or wheel (.whl)"))
    vendor_sha256 = forms.CharField(
        label=_("Vendor's SHA-256"),
        required=False,
        max_length=64,
        help_text=_("As Huawei's download page (or the pip index) lists it; not needed for image archives."),
    )
