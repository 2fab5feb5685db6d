"""The one way to make HTTP clients: httpx everywhere, never the environment's proxies
(every upstream here is a node or engine on the cluster's own network)."""

from __future__ import annotations

import httpx


def http_client(*, timeout: httpx.Timeout | float) -> httpx.Client:
    return httpx.Client(timeout=timeout, trust_env=False)


def async_http_client(
    *, timeout: httpx.Timeout | float, transport: httpx.AsyncBaseTransport | None = None
) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=timeout, transport=transport, trust_env=False)
