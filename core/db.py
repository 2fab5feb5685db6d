"""One way to the database from async code (the gateway, the router's published version): a worker thread, with Django's
connection hygiene (connections older than CONN_MAX_AGE are closed, as after a request)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections

P = ParamSpec("P")
T = TypeVar("T")


def _run(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    close_old_connections()
    try:
        return fn(*args, **kwargs)
    finally:
        close_old_connections()


async def db_call(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    return await sync_to_async(_run, thread_sensitive=False)(fn, *args, **kwargs)
