"""ASGI entry point: HTTP through Django, WebSockets through Channels (auth + origin checks)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from core.ws_origin import SameOriginValidator  # noqa: E402
from gateway.asgi import with_gateway  # noqa: E402
from portal.ws_urls import websocket_urlpatterns  # noqa: E402
from routing.engine import router_unavailable_reason  # noqa: E402

# The router's encoder loads at start-up: a missing or wrong model directory is logged now,
# and model="auto" answers 503 with the reason while every explicit lane keeps serving.
router_unavailable_reason()

# Gateway: /v1/... and /lanes/<lane>/v1/... go straight to the OpenAI-compatible
# gateway, skipping Django's middleware stack (~1.4 ms a request; the gateway authenticates
# by API key, not session). Everything else is unchanged. See gateway/asgi.py.
application = with_gateway(
    ProtocolTypeRouter(
        {
            "http": django_asgi_app,
            "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        }
    )
)
