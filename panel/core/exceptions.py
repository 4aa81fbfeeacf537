"""Every API error body has `detail` (a sentence) and, for validation errors, `errors` keyed by field."""

from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc, context):
    """Every error body has `detail` (a sentence) and, for validation errors, `errors` keyed by field."""
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    data = response.data
    if isinstance(data, dict) and set(data) != {"detail"}:
        fields = {k: v for k, v in data.items() if k != "detail"}
        first = next(iter(fields.items()), None)
        summary = (
            f"{first[0]}: {first[1][0] if isinstance(first[1], list) and first[1] else first[1]}"
            if first
            else ""
        )
        response.data = {"detail": data.get("detail", summary), "errors": fields}
    elif isinstance(data, list):
        response.data = {"detail": str(data[0]) if data else "", "errors": {"non_field_errors": data}}
    return response
