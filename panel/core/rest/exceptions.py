"""Every API error body is JSON: `detail` (one sentence) and, for bad input, `errors` keyed by flat field
paths (`nodes[0].npus`), each a list of sentences. No status, route or setting (DEBUG on or off) gives an
HTML page or a Python repr under /api/; panel.core.web.middleware.ApiErrorsMiddleware catches what never
reaches a DRF view (no route, a body too large, Django's own error pages)."""

import re

from django.db import IntegrityError
from django.http import JsonResponse
from django.urls import Resolver404, resolve
from django.utils.translation import gettext as _
from django.views.csrf import csrf_failure as django_csrf_failure
from django.views.decorators.csrf import csrf_exempt
from django.views.defaults import page_not_found
from django.views.defaults import server_error as django_server_error
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from panel.core.domain.errors import InvalidInput, NotAllowed
from panel.core.rest.safe_input import short

API_PREFIX = "/api/"


def is_api(request) -> bool:
    return request.path_info.startswith(API_PREFIX)


class InputError(exceptions.ValidationError):
    """A 400 whose `detail` sums up all its field errors (\"Unknown fields: a, b.\") rather than naming
    the first one only."""

    def __init__(self, summary: str, errors: dict[str, list[str]]):
        super().__init__(errors)
        self.summary = summary


def not_found_text(request) -> str:
    """The one 404 sentence: no route, an id or a name nothing has, an object the user may not see."""
    return _("No API endpoint or object at {path}.").format(path=request.path)


def flat_errors(errors, path: str = "") -> dict[str, list[str]]:
    """DRF's nested errors ({"nodes": [{}, {"npus": {0: [...]}}]}) as {"nodes[1].npus[0]": [...]}. The
    errors about an object as a whole (non_field_errors) are keyed by the object's own path."""
    flat: dict[str, list[str]] = {}
    if isinstance(errors, dict):
        for key, value in errors.items():
            if key == api_settings.NON_FIELD_ERRORS_KEY and path:
                where = path
            elif isinstance(key, int):
                where = f"{path}[{key}]"
            else:
                where = f"{path}.{key}" if path else str(key)
            for sub, messages in flat_errors(value, where).items():
                flat.setdefault(sub, []).extend(messages)
    elif isinstance(errors, list) and any(isinstance(item, (dict, list)) for item in errors):
        for index, item in enumerate(errors):
            if item:  # a list serializer reports {} for each item that passed
                for sub, messages in flat_errors(item, f"{path}[{index}]").items():
                    flat.setdefault(sub, []).extend(messages)
    else:
        messages = errors if isinstance(errors, list) else [errors]
        flat[path or api_settings.NON_FIELD_ERRORS_KEY] = [short(str(message)) for message in messages]
    return flat


def _summary(errors: dict[str, list[str]]) -> str:
    path, messages = next(iter(errors.items()), ("", [""]))
    first = messages[0] if messages else ""
    return first if path == api_settings.NON_FIELD_ERRORS_KEY else f"{path}: {first}"


# SQLite: "UNIQUE constraint failed: deployments_deployment.name"; PostgreSQL (SQLSTATE 23505):
# 'duplicate key value violates unique constraint "…"' with "Key (name)=(qwen) already exists.".
SQLITE_UNIQUE = re.compile(r"UNIQUE constraint failed: (.+)")
POSTGRES_KEY = re.compile(r"Key \((.+?)\)=")


def unique_violation(error: IntegrityError) -> list[str] | None:
    """The columns of the unique constraint `error` hit (["name"]), [] when the database did not say
    which, or None when it is no unique violation (a missing reference, a null: the panel's own bug)."""
    cause = error.__cause__
    if getattr(cause, "sqlstate", None) == "23505":  # psycopg
        found = POSTGRES_KEY.search(str(getattr(getattr(cause, "diag", None), "message_detail", "") or ""))
        return [column.strip() for column in found.group(1).split(",")] if found else []
    found = SQLITE_UNIQUE.search(str(error))
    if found is None:
        return None
    return [column.strip().rsplit(".", 1)[-1] for column in found.group(1).split(",")]


def conflict_text(columns: list[str]) -> str:
    """What a create that lost a race to another request reads (409): another request made the same."""
    if columns:
        return _(
            "Another request has just made one with the same {fields}: read it again, then retry "
            "or change it."
        ).format(fields=", ".join(columns))
    return _("Another request has just made the same object: read it again, then retry or change it.")


def exception_handler(exc, context):
    """DRF's handler, then the one error shape. The panel's own errors answer as DRF's would: InvalidInput
    a 400 as a ValidationError, NotAllowed a 403 as PermissionDenied. A unique constraint a request hits (two
    creates of one name that raced past every check) is a 409, never a 500."""
    if isinstance(exc, InvalidInput):
        exc = exceptions.ValidationError(exc.detail)
    elif isinstance(exc, NotAllowed):
        exc = exceptions.PermissionDenied(exc.detail)
    if isinstance(exc, IntegrityError):
        columns = unique_violation(exc)
        if columns is None:
            return None  # a bug: the 500 it is, with its traceback in the log
        set_rollback()
        return Response({"detail": conflict_text(columns)}, status=status.HTTP_409_CONFLICT)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    data = response.data
    if response.status_code == 404:
        response.data = {"detail": not_found_text(context["request"])}
    elif isinstance(data, dict) and set(data) == {"detail"} and isinstance(data["detail"], str):
        response.data = {"detail": short(str(data["detail"]))}
    else:
        errors = flat_errors(data)
        if "detail" in errors:  # ValidationError({"detail": [...]}): about the request as a whole
            errors.setdefault(api_settings.NON_FIELD_ERRORS_KEY, []).extend(errors.pop("detail"))
        errors = {short(path): messages for path, messages in errors.items()}
        detail = short(getattr(exc, "summary", None) or _summary(errors))
        response.data = {"detail": detail, "errors": errors}
    return response


@csrf_exempt  # it changes nothing: a POST without a CSRF token gets the 404 too, not a CSRF 403
def api_not_found(request, *args, **kwargs):
    """Every /api/ URL no route matches, whatever the method, the credentials (none, a token, a session
    without its CSRF token) and with DEBUG on (where Django would show its technical 404 page and turn a POST
    without its trailing slash into a 500). A path that names an endpoint but for its trailing slash says
    so: SDKs and scripts often drop it (`POST /api/v1/deployments`)."""
    detail = not_found_text(request)
    hint = trailing_slash_hint(request)
    if hint:
        # Translated as a whole: Chinese puts no space after the full stop.
        detail = _("{not_found} {hint}").format(not_found=detail, hint=hint)
    return JsonResponse({"detail": detail}, status=404)


def trailing_slash_hint(request) -> str | None:
    """A sentence naming the endpoint this path misses by its trailing slash only, or None."""
    path = request.path_info
    if path.rstrip("/") in ("", API_PREFIX.rstrip("/")):
        return None
    needs_slash = not path.endswith("/")
    candidate = path + "/" if needs_slash else path[:-1]
    try:
        match = resolve(candidate, getattr(request, "urlconf", None))
    except Resolver404:
        return None
    if match.func is api_not_found:
        return None
    fixed = request.path + "/" if needs_slash else request.path[:-1]
    if needs_slash:
        return _("This path needs its trailing slash: {path}").format(path=fixed)
    return _("This path takes no trailing slash: {path}").format(path=fixed)


def csrf_failure(request, reason=""):
    """CSRF_FAILURE_VIEW: under /api/ the error shape with a sentence that names the cause (the generic 403
    text, "Your role may not do this.", blamed the user's role); pages keep Django's page."""
    if is_api(request):
        return JsonResponse({"detail": _("CSRF check failed: send the X-CSRFToken header.")}, status=403)
    return django_csrf_failure(request, reason)


def not_found(request, exception):
    """Django's 404 handler: API clients get the error shape in JSON, pages get the usual HTML page."""
    if is_api(request):
        return api_not_found(request)
    return page_not_found(request, exception)


def server_error(request):
    """Django's 500 handler: API clients get the error shape in JSON rather than an HTML page."""
    if is_api(request):
        return JsonResponse(
            {"detail": _("The panel failed on this request; its log has the details.")}, status=500
        )
    return django_server_error(request)
