"""The gateway's one upstream HTTP client (aiohttp's pooled session, one per process and
event loop; httpx's API over it for the calls off the hot path) and the rule that decides
whether a failed send may be failed over: only when the upstream provably never received
the request."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx
from django.conf import settings
from httpx_aiohttp import AiohttpTransport

from core.http import async_http_client
from gateway.body import StreamedBody


def upstream_timeouts() -> dict[str, float]:
    return {
        "connect": settings.GATEWAY_CONNECT_TIMEOUT_S,
        "read": settings.GATEWAY_READ_TIMEOUT_S,
        "write": settings.GATEWAY_READ_TIMEOUT_S,
        "pool": settings.GATEWAY_CONNECT_TIMEOUT_S,
    }


def upstream_transport() -> AiohttpTransport:
    """Plain httpx's connection pool costs ~2.5 ms a request on this CPU and scales badly
    with concurrency; its aiohttp transport keeps httpx's API at aiohttp's speed. No
    retries anywhere: a retry is how one request becomes two (LiteLLM PR #34129)."""
    limits = httpx.Limits(
        max_connections=settings.GATEWAY_MAX_CONNECTIONS,
        max_keepalive_connections=settings.GATEWAY_MAX_CONNECTIONS,
        keepalive_expiry=30,
    )
    return AiohttpTransport(limits=limits, trust_env=False)


def upstream_client(transport: AiohttpTransport) -> httpx.AsyncClient:
    """The full client over the same pool, for the calls off the hot path (/tokenize, mirroring)."""
    return async_http_client(transport=transport, timeout=httpx.Timeout(**upstream_timeouts()))


JSON_HEADERS = {"content-type": "application/json"}


def body_arguments(body: bytes | StreamedBody) -> dict[str, Any]:
    """httpx's `content` and headers for a body (the calls off the hot path): a StreamedBody
    goes in slices, with its length announced (not chunked: every engine reads a
    content-length)."""
    if isinstance(body, bytes):
        return {"content": body, "headers": JSON_HEADERS}
    return {"content": body.chunks(), "headers": {**JSON_HEADERS, "content-length": str(body.length)}}


# What the relay reads at a time from a streamed answer (as httpx-aiohttp read it).
STREAM_READ_BYTES = 16 * 1024


class UpstreamResponse:
    """The lane's answer as the relay reads it: aiohttp's response, without the httpx
    Response that httpx-aiohttp builds around it (its Request, URL parsing and byte-stream
    layers cost ~10% of the gateway's CPU per request, py-spy at 16 clients). Errors are
    aiohttp's own; upstream.is_timeout, describe_failure and provably_not_received read them."""

    __slots__ = ("_response", "status_code")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status_code = response.status

    @property
    def stream(self) -> AsyncIterator[bytes]:
        return self._response.content.iter_chunked(STREAM_READ_BYTES)

    async def aread(self) -> bytes:
        return await self._response.read()

    async def aclose(self) -> None:
        # Released to the pool when the answer was read whole; otherwise the connection is
        # closed, which is how vLLM learns that a request was abandoned.
        await self._response.__aexit__(None, None, None)


def session_of(transport: AiohttpTransport) -> aiohttp.ClientSession:
    """The aiohttp session (and connection pool) under the shared httpx transport."""
    if not isinstance(transport.client, aiohttp.ClientSession):
        transport.client = transport.get_client()
    return transport.client


async def upstream_send(transport: AiohttpTransport, url: str, body: bytes | StreamedBody) -> UpstreamResponse:
    """The hot path's one upstream call, on aiohttp directly (the same pool as the httpx
    client, with the same timeouts and no retry, redirect or decompression). A StreamedBody
    goes in slices, with its length announced (not chunked: every engine reads a
    content-length)."""
    timeouts = upstream_timeouts()
    timeout = aiohttp.ClientTimeout(sock_connect=timeouts["connect"], sock_read=timeouts["read"],
                                    connect=timeouts["pool"])
    if isinstance(body, bytes):
        data: bytes | AsyncIterator[bytes | memoryview] = body
        headers = JSON_HEADERS
    else:
        data = body.chunks()
        headers = {**JSON_HEADERS, "content-length": str(body.length)}
    response = await session_of(transport).request(
        "POST", url, data=data, headers=headers, timeout=timeout, allow_redirects=False, auto_decompress=False)
    return UpstreamResponse(response)


def provably_not_received(exc: BaseException) -> bool:
    """True only when no byte of the request can have reached the upstream: the TCP
    connection itself was refused or unreachable. httpx-aiohttp maps every aiohttp
    connection error (even a reset after the request was written) to ConnectTimeout, so
    the decision looks at the original aiohttp exception. Timeouts never qualify."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, aiohttp.ClientConnectorError) and not isinstance(
            cause, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError
        ):
            return True
        if isinstance(cause, aiohttp.ClientConnectionError | TimeoutError):
            return False
        if isinstance(cause, ConnectionRefusedError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def is_timeout(exc: BaseException) -> bool:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, TimeoutError | aiohttp.ServerTimeoutError | httpx.TimeoutException) and not isinstance(
            cause, httpx.ConnectTimeout
        ):
            return True
        if isinstance(cause, aiohttp.ServerTimeoutError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def describe_failure(exc: BaseException) -> str:
    """What really happened to a connection, in words: httpx-aiohttp reports every aiohttp
    connection error as ConnectTimeout, so the message reads the original cause."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, aiohttp.ServerDisconnectedError):
            return "the lane closed the connection without answering"
        if isinstance(cause, aiohttp.ClientPayloadError):
            return "the lane's answer was cut off"
        if isinstance(cause, ConnectionResetError):
            return "the lane reset the connection"
        if isinstance(cause, aiohttp.ClientConnectorError):
            return "the connection to the lane could not be opened"
        if isinstance(cause, aiohttp.ClientOSError | OSError) and str(cause):
            return f"the connection to the lane failed ({cause})"
        cause = cause.__cause__ or cause.__context__
    return f"the connection to the lane failed ({type(exc).__name__})"
