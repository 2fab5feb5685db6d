"""Every WebSocket route. Apps keep theirs in <app>/ws_urls.py (not routing.py: that name
is our router app)."""

from django.urls import URLPattern, path, re_path

from core.consumers import HeaderConsumer, UnknownSocketConsumer
from jobs.ws_urls import websocket_urlpatterns as jobs_ws
from portal.consumers import DashboardConsumer
from routing.ws_urls import websocket_urlpatterns as routing_ws

websocket_urlpatterns: list[URLPattern] = [
    path("ws/dashboard/", DashboardConsumer.as_asgi()),
    path("ws/header/", HeaderConsumer.as_asgi()),
    *jobs_ws,
    *routing_ws,
    re_path(r"", UnknownSocketConsumer.as_asgi()),  # last: every other path is refused with a code
]
