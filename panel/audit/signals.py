"""Sign-ins reach the audit log through Django's and django-axes' signals: the sign-in page, Django's admin
and HTTP Basic on the API all authenticate through django.contrib.auth, so one place sees them all."""

from django.contrib.auth.signals import user_logged_in, user_login_failed

from panel.audit import actions
from panel.audit.services import record


def _signed_in(sender, request, user, **kwargs):
    record(user, actions.SIGNIN_SUCCEEDED, user.get_username(), request=request)


def _sign_in_failed(sender, credentials, request=None, **kwargs):
    name = str(credentials.get("username") or "")
    record(name, actions.SIGNIN_FAILED, name, request=request)


def _locked_out(sender, request, username, ip_address, **kwargs):
    record(username or "", actions.SIGNIN_LOCKED_OUT, username or "", request=request)


def connect() -> None:
    from axes.signals import user_locked_out

    user_logged_in.connect(_signed_in, dispatch_uid="panel.audit.signed_in")
    user_login_failed.connect(_sign_in_failed, dispatch_uid="panel.audit.sign_in_failed")
    user_locked_out.connect(_locked_out, dispatch_uid="panel.audit.locked_out")
