"""The base viewsets every app's API extends: querysets narrowed to what the user may see, objects found by
id or by name, and a strict reading of every request.

Strict requests (StrictRequestMixin, part of PanelViewSet): a query parameter or a body field that
/api/schema/ does not document for the operation is refused with 400 naming it (panel.core.rest.strict). So a
view documents every parameter it reads, either with @extend_schema(parameters=[...]) (typed, preferred
for a view's own parameters) or with the class attribute

    extra_query_params = {
        "create": {"wait": "Answer once the deployment is running, stopped or deleted.", "timeout": "..."},
        "destroy": {"wait": "..."},
    }

mapping an action (a viewset's action name, or the HTTP method in lower case for a plain APIView) to the
names it reads and a description of each (a string, or a drf_spectacular OpenApiParameter for a typed one).
panel.core.rest.schema documents them; they are then accepted like every documented parameter. A plain Django
view under /api/ (an async one) is not a DRF view: it calls panel.core.rest.strict.check_request(request)
itself
(through sync_to_async) to refuse undocumented query parameters.

Lookups (NameLookupMixin, part of PanelViewSet): `/api/v1/<resource>/<id or name>/`. A value of digits only
is the primary key, anything else the resource's `lookup_name_field` (a unique name; "name" unless set; a
model without that field, or None, makes a resource addressed by id only). A name made of digits only is
therefore reachable by its id only.
"""

from django.core.exceptions import FieldDoesNotExist
from django.http import Http404
from django.utils.translation import gettext as _
from rest_framework import mixins, viewsets
from rest_framework.generics import get_object_or_404  # a value of the wrong type is a 404 too
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.settings import api_settings

from panel.core.rest import strict
from panel.core.rest.exceptions import InputError

# A name may hold dots (`qwen2.5-7b`, `toolkit_8.0.run`); DRF's default refuses them.
LOOKUP_VALUE_REGEX = r"[^/]+"


def is_id(value: str) -> bool:
    return value.isascii() and value.isdigit()


def name_field_of(model, wanted: str | None) -> str | None:
    """`wanted` when `model` has such a field, else None: the resource is then found by id only."""
    if not wanted:
        return None
    try:
        model._meta.get_field(wanted)
    except FieldDoesNotExist:
        return None
    return wanted


class StrictRequestMixin:
    """Refuses undocumented query parameters and body fields (see the module docstring), and answers
    every error in JSON, whatever the client accepts (a browser's text/html, YAML for a spec)."""

    extra_query_params: dict[str, dict] = {}

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        strict.check_request(request)

    def perform_content_negotiation(self, request, force=False):
        """`?format=` naming no format of this endpoint is a 400 naming it (DRF answers 404)."""
        try:
            return super().perform_content_negotiation(request, force)
        except Http404:
            formats = ", ".join(sorted({renderer.format for renderer in self.get_renderers()}))
            message = _("Unknown format; this endpoint answers in: {formats}.").format(formats=formats)
            raise InputError(message, {api_settings.URL_FORMAT_OVERRIDE: [message]}) from None

    def finalize_response(self, request, response, *args, **kwargs):
        if isinstance(response, Response) and response.status_code >= 400:
            request.accepted_renderer, request.accepted_media_type = JSONRenderer(), "application/json"
        return super().finalize_response(request, response, *args, **kwargs)


class NameLookupMixin:
    """get_object() by id (all digits) or by `lookup_name_field`."""

    lookup_name_field: str | None = "name"
    lookup_value_regex = LOOKUP_VALUE_REGEX

    def get_object(self):
        value = str(self.kwargs[self.lookup_url_kwarg or self.lookup_field])
        queryset = self.filter_queryset(self.get_queryset())
        name_field = name_field_of(queryset.model, self.lookup_name_field)
        field = "pk" if is_id(value) or not name_field else name_field
        obj = get_object_or_404(queryset, **{field: value})
        self.check_object_permissions(self.request, obj)
        return obj


class PanelViewSet(StrictRequestMixin, NameLookupMixin, viewsets.GenericViewSet):
    """Querysets are always narrowed to what the user may see (one permission rule for every endpoint)."""

    def get_queryset(self):
        return super().get_queryset().visible_to(self.request.user)


class ReadOnlyPanelViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PanelViewSet):
    pass
