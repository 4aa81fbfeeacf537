"""The panel's own errors, raised by domain code (services, planners, the spec's apply) and answered by each
edge in its own way: the API maps them to HTTP (panel.core.rest.exceptions), pages show them beside their
fields.
Domain code raises these rather than an HTTP framework's exceptions, so it can be called from a page, a task
or the API alike; tests/unit/test_layers.py fails on a domain module that imports rest_framework."""

from typing import Any


class InvalidInput(Exception):
    """Input the panel refuses, field by field (the API's 400 carries it as its `errors`): `detail` is
    {field path: [sentences]}, nested as a schema reports it ({"engine": {"port": [...]}}), or [sentences]
    about the input as a whole. A single sentence is made a list of one, as a serializer's errors are, so
    whoever reads `detail` meets one shape."""

    def __init__(self, detail: dict[str, Any] | list[Any] | str):
        if not isinstance(detail, dict | list):
            detail = [detail]
        super().__init__(detail)
        self.detail = detail


class NotAllowed(Exception):
    """A request the user's role may not make (the API's 403): `detail` is the sentence that says who may
    and what to do instead."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail
