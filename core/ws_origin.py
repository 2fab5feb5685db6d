"""WebSocket origin check: a cookie-carrying socket is accepted only from the page's own
origin — scheme, host and port equal to the request's — or from a trusted origin
(settings.CSRF_TRUSTED_ORIGINS, the same list Django's CSRF check trusts)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import validate_host

DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
# A socket is opened by a page: its scheme is the page's (http/https), the socket's ws/wss.
PAGE_SCHEME = {"ws": "http", "wss": "https"}


def normalized_origin(text: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin or URL; None when it is not one."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return PAGE_SCHEME.get(scheme, scheme), parts.hostname.lower(), port or DEFAULT_PORTS[scheme]


def request_origin(scope: dict[str, Any]) -> tuple[str, str, int] | None:
    """The origin the page was served from, as the socket's own request sees it: the Host
    header and the scheme (ws/wss, https behind a proxy with --proxy-headers)."""
    headers = dict(scope.get("headers") or [])
    host = headers.get(b"host", b"").decode("latin1")
    if not host:
        return None
    return normalized_origin(f"{scope.get('scheme') or 'ws'}://{host}")


def origin_allowed(scope: dict[str, Any]) -> bool:
    headers = dict(scope.get("headers") or [])
    raw = headers.get(b"origin")
    if raw is None:
        return False  # browsers always send Origin on a WebSocket; a cookie without one is not a page
    origin = normalized_origin(raw.decode("latin1"))
    if origin is None:
        return False
    own = request_origin(scope)
    if own is not None and origin == own and validate_host(own[1], settings.ALLOWED_HOSTS):
        return True
    return any(origin == normalized_origin(trusted) for trusted in settings.CSRF_TRUSTED_ORIGINS)


class SameOriginValidator:
    """ASGI middleware in front of the WebSocket stack (replaces Channels' host-only check)."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not origin_allowed(scope):
            denier = WebsocketDenier()
            return await denier(scope, receive, send)
        return await self.application(scope, receive, send)
