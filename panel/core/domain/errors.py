"""The panel's own errors, raised by domain code (services, planners, the spec's apply) and answered by each
edge in its own way: the API maps them to HTTP (panel.core.rest.exceptions), pages show them beside their
fields.
Domain code raises these rather than an HTTP framework's exceptions, so it can be called from a page, a task
or the API alike."""


class InvalidInput(Exception):
    """Input the panel refuses, field by field: `detail` is {field path: [sentences]} (the API's 400 carries
    it as its `errors`)."""

    def __init__(self, detail: dict[str, list[str]]):
        super().__init__(detail)
        self.detail = detail
