"""A perftest run is two commands on two nodes: the server listens first, then the client
connects to it. Both go over the nodes' transports; the jobs and the watchdog use this."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from jobs.fabric.commands import READY_MARKER
from jobs.transports import CommandResult, Transport
from jobs.transports.base import LineCallback


@dataclass
class PairResult:
    server: CommandResult
    client: CommandResult | None  # None: the server never started listening

    @property
    def ok(self) -> bool:
        return self.client is not None and self.client.ok and self.server.ok

    def failure(self) -> str:
        """The tool's own last words, from whichever side failed."""
        side = self.server if self.client is None or self.client.ok else self.client
        lines = [line.strip() for line in [*side.stdout, *side.stderr] if line.strip() and not line.startswith("---")]
        return lines[-1] if lines else f"exit status {side.exit_code}"


async def run_pair(
    *, server: Transport, server_command: str, client: Transport, client_command: str,
    on_server_line: LineCallback, on_client_line: LineCallback, timeout_s: float,
) -> PairResult:
    ready = asyncio.Event()

    def server_line(stream: str, raw: bytes, dropped: int) -> None:
        on_server_line(stream, raw, dropped)
        if READY_MARKER.encode() in raw:
            ready.set()

    serving = asyncio.ensure_future(server.run(server_command, on_line=server_line, capture=True,
                                               timeout_s=timeout_s))
    waiting = asyncio.ensure_future(ready.wait())
    try:
        await asyncio.wait({serving, waiting}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if not ready.is_set():
            if serving.done():
                return PairResult(serving.result(), None)
            raise TimeoutError(f"the {server.node.name} side never listened within {timeout_s:g} s")
        answer = await client.run(client_command, on_line=on_client_line, capture=True, timeout_s=timeout_s)
        if not answer.ok:
            serving.cancel()  # kills the listening server on its node
            with contextlib.suppress(asyncio.CancelledError):
                await serving
            return PairResult(CommandResult(exit_code=0), answer)
        return PairResult(await asyncio.wait_for(serving, timeout_s), answer)
    finally:
        waiting.cancel()
        if not serving.done():
            serving.cancel()
            with contextlib.suppress(BaseException):
                await serving
