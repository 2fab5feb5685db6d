"""WebSocket consumers only authenticate, check the role, join a group and forward
(the AWX lesson). `PortalConsumer` is the base every live page's consumer uses."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any, ClassVar, NoReturn

from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.contrib.auth import get_user
from django.contrib.auth.models import User

from core.broadcast import HEADER_GROUP, user_group
from core.roles import Capability, user_can
from core.socket_loop import SocketLoop

# Close codes (4000-4999 are the application's): the page shows why it was refused.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
# RFC 6455: a text frame that is not the JSON this socket speaks; a binary frame.
CLOSE_INVALID_PAYLOAD = 1007
CLOSE_UNSUPPORTED_DATA = 1003
# Where the first consumer leaves a group message's JSON text for the others.
ENCODED_KEY = "_portal_encoded"


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


class PortalConsumer(SocketLoop, AsyncJsonWebsocketConsumer):
    capability: ClassVar[Capability] = Capability.VIEW

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.end(CLOSE_UNAUTHENTICATED)
        if not await self.user_allowed(user):
            await self.end(CLOSE_FORBIDDEN)
        self.joined: list[str] = []
        for group in [user_group(user.pk), *await self.groups_for_connection()]:
            await self.channel_layer.group_add(group, self.channel_name)
            self.joined.append(group)
        await self.accept()
        await self.on_accepted()

    async def user_allowed(self, user: Any) -> bool:
        return bool(await database_sync_to_async(user_can)(user, self.capability))

    async def portal_access(self, message: dict[str, Any]) -> None:  # noqa: ARG002 (a group message handler)
        """The account changed (core.broadcast.announce_access_change: role, active flag,
        password, a logout): read it again through the socket's session, as the next request
        would — a session logged out, or older than a password change, no longer reads."""
        fresh = await database_sync_to_async(_session_user)(self.scope)
        if fresh is None or not await self.user_allowed(fresh):
            await self.end(CLOSE_FORBIDDEN)
        await self.access_kept(fresh)

    async def access_kept(self, user: Any) -> None:
        """Hook: the account changed and may still read the socket (a group it joined for a
        higher role is left here)."""

    async def groups_for_connection(self) -> list[str]:
        return []

    async def on_accepted(self) -> None:
        """Hook for consumers that send an initial snapshot (send_current)."""

    async def send_current(self, read: Callable[[], Sequence[tuple[str, Any]]]) -> None:
        """The current state, as the live events the page already handles, on every (re)connect:
        what changed while the socket was down is not lost. Stamped when reading began, so the
        page drops a live message sent before it (already in the snapshot: saved first)."""
        at = time.time()
        for event, data in await database_sync_to_async(read)():
            await self.send_json({"event": event, "data": data, "at": at, "snapshot": True})

    async def disconnect(self, code: int) -> None:  # noqa: ARG002 (Channels' disconnect hook)
        for group in getattr(self, "joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)
        self.joined = []

    async def end(self, code: int) -> NoReturn:
        """Close with `code` and stop this consumer now: it leaves its groups and stops reading
        its channel instead of waiting for the client's disconnect (a client that never sends
        one, or a test, would leave the consumer reading the channel layer forever)."""
        await self.close(code=code)
        await self.disconnect(code)
        raise StopConsumer

    async def portal_event(self, message: dict[str, Any]) -> None:
        # The channel layer hands one message object to every consumer of this process in the
        # group (one delivery per process): encode it once, not once per socket (a tick is
        # ~27 KiB of JSON and a web process may hold hundreds of dashboards).
        text = message.get(ENCODED_KEY)
        if text is None:
            text = await self.encode_json({"event": message["event"], "data": message["data"], "at": message.get("at")})
            message[ENCODED_KEY] = text
        await self.send(text_data=text)

    @classmethod
    async def decode_json(cls, text_data: str) -> Any:
        """Strict JSON: NaN and ±Infinity are not JSON (Python's json reads them)."""
        return json.loads(text_data, parse_constant=_not_json)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any) -> None:  # noqa: ARG002 (Channels' receive hook)
        """A bad message closes the socket with a code saying why (never a traceback)."""
        if text_data is None:
            await self.end(CLOSE_UNSUPPORTED_DATA)
        try:
            content = await self.decode_json(text_data)
        except ValueError:  # json.JSONDecodeError, and "NaN"-like constants
            await self.end(CLOSE_INVALID_PAYLOAD)
        await self.receive_json(content, **kwargs)


def _session_user(scope: dict[str, Any]) -> User | None:
    """The socket's session as it is now: its user if the session still exists and still
    authenticates (Django's get_user: the account active, the password hash unchanged)."""
    session = scope.get("session")
    session_key = getattr(session, "session_key", None)
    if session is None or not session_key:
        return None
    store = session.__class__(session_key=session_key)  # a fresh read (the scope's is a LazyObject of the engine's store)
    user = get_user(SimpleNamespace(session=store))  # type: ignore[arg-type]  # get_user reads .session only
    return user if isinstance(user, User) and user.pk == scope["user"].pk else None


class UnknownSocketConsumer(SocketLoop, AsyncJsonWebsocketConsumer):
    """Any /ws/ path that names no socket: refused with 4404, not a routing traceback."""

    async def connect(self) -> None:
        await self.close(code=CLOSE_NOT_FOUND)
        raise StopConsumer  # nothing joined: stop reading the channel now (PortalConsumer.end)


# The header socket's first messages: each app that shows something in every page's header
# registers (in its AppConfig.ready) a name and a function returning (event, data) — the
# portal knows no app — and broadcasts each change to HEADER_GROUP itself.
HeaderSnapshot = Callable[[], tuple[str, Any]]
HEADER_SNAPSHOTS: dict[str, HeaderSnapshot] = {}


def register_header_snapshot(name: str, snapshot: HeaderSnapshot) -> None:
    HEADER_SNAPSHOTS[name] = snapshot


class HeaderConsumer(PortalConsumer):
    """Every page of a viewer or above: the header's live figures, current on connect (a
    change between the page's render and the socket's open is not lost), then each change."""

    capability = Capability.VIEW

    async def groups_for_connection(self) -> list[str]:
        return [HEADER_GROUP]

    async def on_accepted(self) -> None:
        await self.send_current(lambda: [snapshot() for snapshot in list(HEADER_SNAPSHOTS.values())])
