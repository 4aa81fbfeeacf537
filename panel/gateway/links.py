from django.conf import settings


def gateway_url(request=None) -> str:
    """The /v1 base URL users give their OpenAI clients: PANEL_URL's, else the address the viewer used."""
    if settings.PANEL_URL:
        return f"{settings.PANEL_URL.rstrip('/')}/v1"
    if request is not None:
        return request.build_absolute_uri("/v1")
    return "/v1"
