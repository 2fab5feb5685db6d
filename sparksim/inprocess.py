"""A sparksim engine served from the caller's own event loop (aiohttp on a loopback port),
so a client on the same loop, sparksim.virtual_clock's included, can benchmark it over real
HTTP while the engine keeps the simulated clock."""

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

from sparksim.engine.config import EngineConfig, build_engine_config
from sparksim.engine.server import EngineServer
from sparksim.engine.vllm_args import parse_serve_args


def engine_config(model: str, *flags: str, host: str = "127.0.0.1") -> EngineConfig:
    with socket.socket() as probe:
        probe.bind((host, 0))
        port = probe.getsockname()[1]
    return build_engine_config(parse_serve_args(
        [model, "--host", host, "--port", str(port), "--time-scale", "1", *flags]))


@asynccontextmanager
async def serving(config: EngineConfig) -> AsyncIterator[str]:
    """Yields the engine's base URL while it serves."""
    server = EngineServer(config)
    server.core.start()
    runner = web.AppRunner(server.app, access_log=None, handle_signals=False, shutdown_timeout=0.1,
                           handler_cancellation=server.cancels_on_disconnect)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port, reuse_address=True)
    await site.start()
    try:
        yield f"http://{config.host}:{config.port}"
    finally:
        await server.core.stop()
        await runner.cleanup()
