"""LocalTransport: the same bash lines on this machine (sparksim nodes of the demo)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

from jobs.transports.base import (
    CommandResult,
    CommandTimeout,
    LineCallback,
    NodeEndpoint,
    StreamCollector,
    wrap_command,
)

# After the command exits, a daemon it started may still hold our pipes: stop reading then.
PIPE_GRACE_S = 2.0
KILL_GRACE_S = 2.0


async def pump(reader: asyncio.StreamReader | None, stream: str, collector: StreamCollector) -> None:
    if reader is None:
        return
    while True:
        chunk = await reader.read(65536)
        if not chunk:
            return
        collector.feed(stream, chunk)


class LocalTransport:
    def __init__(self, node: NodeEndpoint) -> None:
        self.node = node

    async def run(
        self,
        command: str,
        *,
        on_line: LineCallback,
        stdin: str | None = None,
        timeout_s: float = 120.0,
        capture: bool = False,
    ) -> CommandResult:
        collector = StreamCollector(on_line, capture)
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", wrap_command(command, self.node.sim_dir),
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group: cancel kills the whole tree
        )
        readers = [
            asyncio.ensure_future(pump(proc.stdout, "stdout", collector)),
            asyncio.ensure_future(pump(proc.stderr, "stderr", collector)),
        ]
        try:
            if stdin is not None and proc.stdin is not None:
                proc.stdin.write(stdin.encode())
                await proc.stdin.drain()
                proc.stdin.close()
            try:
                code = await asyncio.wait_for(proc.wait(), timeout=timeout_s)
            except TimeoutError:
                raise CommandTimeout(self.node.name, f"command still running after {timeout_s:g}s: killed") from None
            await asyncio.wait(readers, timeout=PIPE_GRACE_S)
        except BaseException:
            await self._kill_group(proc)
            raise
        finally:
            for reader in readers:
                reader.cancel()
            collector.finish()
        collector.result.exit_code = code
        return collector.result

    async def _kill_group(self, proc: asyncio.subprocess.Process) -> None:
        if proc.returncode is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                await asyncio.wait_for(asyncio.shield(proc.wait()), timeout=KILL_GRACE_S)
                return
            except TimeoutError:
                continue

    async def close(self) -> None:
        return None
