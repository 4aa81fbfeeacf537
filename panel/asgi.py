import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "panel.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from panel.realtime.auth import BrowserOriginOrToken, PanelAuthStack  # noqa: E402
from panel.realtime.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": BrowserOriginOrToken(PanelAuthStack(URLRouter(websocket_urlpatterns))),
    }
)
