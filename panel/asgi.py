import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "panel.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from panel.gateway.proxy.asgi import application as gateway_app  # noqa: E402
from panel.realtime.auth import BrowserOriginOrToken, PanelAuthStack  # noqa: E402
from panel.realtime.routing import websocket_urlpatterns  # noqa: E402


async def http_app(scope, receive, send):
    """/v1/ is the OpenAI-compatible gateway (panel/gateway/proxy/asgi.py); everything else is Django."""
    path = scope["path"]
    if path == "/v1" or path.startswith("/v1/"):
        return await gateway_app(scope, receive, send)
    return await django_asgi_app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": http_app,
        "websocket": BrowserOriginOrToken(PanelAuthStack(URLRouter(websocket_urlpatterns))),
    }
)
