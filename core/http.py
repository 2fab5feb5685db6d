"""The one way to make HTTP clients: httpx everywhere, never the environment's proxies
(every upstream here is a node or engine on the cluster's own network)."""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """Loaded once per process: httpx builds a context (and parses the CA bundle) for every
    client otherwise, ~30-60 ms of CPU each — most of a scrape tick's own CPU when the tick
    opens one client. The default context's settings, shared (SSLContext is thread-safe)."""
    return httpx.create_ssl_context(trust_env=False)


def http_client(*, timeout: httpx.Timeout | float) -> httpx.Client:
    return httpx.Client(timeout=timeout, trust_env=False, verify=_tls_context())


def async_http_client(
    *, timeout: httpx.Timeout | float, transport: httpx.AsyncBaseTransport | None = None,
    limits: httpx.Limits | None = None,
) -> httpx.AsyncClient:
    """`limits`: httpx's default pool (100 connections, 20 kept idle) unless given: a load
    generator sizes its own, or requests past the 100th wait in the client and the wait reads
    as latency."""
    if limits is None:
        return httpx.AsyncClient(timeout=timeout, transport=transport, trust_env=False, verify=_tls_context())
    return httpx.AsyncClient(timeout=timeout, transport=transport, trust_env=False, verify=_tls_context(),
                             limits=limits)
