from django.core.paginator import InvalidPage
from django.utils.translation import gettext as _
from rest_framework import pagination
from rest_framework.exceptions import ValidationError


class StandardPagination(pagination.PageNumberPagination):
    """`page` and `page_size` that make no sense are refused with 400 naming the parameter (DRF would
    answer 404 for a bad page and silently ignore a bad page size); a page size over the maximum is
    clamped to it."""

    page_size_query_param = "page_size"
    max_page_size = 1000

    def get_schema_operation_parameters(self, view):
        """What the two parameters take, as get_page_size and get_page_number check it."""
        return [
            {
                "name": self.page_query_param,
                "required": False,
                "in": "query",
                "description": "A page number (the first is 1), or `last`.",
                "schema": {
                    "oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "enum": ["last"]}]
                },
            },
            {
                "name": self.page_size_query_param,
                "required": False,
                "in": "query",
                "description": f"Results per page (default {self.page_size}); a larger size than "
                f"{self.max_page_size} is taken as {self.max_page_size}.",
                "schema": {"type": "integer", "minimum": 1, "default": self.page_size},
            },
        ]

    def get_page_size(self, request):
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        size = _whole_number(raw)
        if size is None or size < 1:
            raise ValidationError(
                {self.page_size_query_param: [_("page_size must be a whole number of 1 or more.")]}
            )
        return min(size, self.max_page_size)

    def get_page_number(self, request, paginator):
        raw = request.query_params.get(self.page_query_param)
        if not raw:
            return 1
        if raw in self.last_page_strings:
            return paginator.num_pages
        number = _whole_number(raw)
        if number is None or number < 1:
            raise ValidationError(
                {self.page_query_param: [_("page must be a whole number of 1 or more, or 'last'.")]}
            )
        return number

    def paginate_queryset(self, queryset, request, view=None):
        self.request = request
        paginator = self.django_paginator_class(queryset, self.get_page_size(request))
        try:
            self.page = paginator.page(self.get_page_number(request, paginator))
        except InvalidPage:
            message = _("There is no such page: the last page is {last}.").format(last=paginator.num_pages)
            raise ValidationError({self.page_query_param: [message]}) from None
        return list(self.page)


def _whole_number(raw: str) -> int | None:
    try:
        return int(raw)
    except ValueError:
        return None
