import os
import sys

from django.core.asgi import get_asgi_application

# The web process's event loop shares the GIL with threads: the gateway's background reads of its pool and
# keys from the database (panel.gateway.access.identity), Django's sync views. At the default switch interval
# (5 ms) such a thread held each wake-up of the loop for up to 5 ms: bench/pd.py measured a Redis round trip
# of 0.5 ms taking 5 ms whenever a pool read ran beside it, on most PD requests (docs/serving-plane.md §4).
# At 0.5 ms the loop waits a tenth of that; a thread's own work is no slower, only cut into finer slices.
sys.setswitchinterval(0.0005)

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
