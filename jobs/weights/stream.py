"""A command whose progress lines feed a step instead of the log (a transfer prints one
every fraction of a second); every other line goes to the job log as usual."""

from __future__ import annotations

import time
from collections.abc import Callable

from jobs.logtext import clean_line
from jobs.runner import JobContext
from jobs.transports import CommandResult, NodeEndpoint

ProgressLine = Callable[[str], bool]  # True: the line was progress (kept out of the log)


def run_with_progress(ctx: JobContext, endpoint: NodeEndpoint, command: str, on_progress: ProgressLine, *,
                      stdin: str | None = None, timeout_s: float = 3600.0) -> CommandResult:
    ctx.check()
    ctx.log(f"$ {command}" if stdin is None else f"$ {command}  (input on stdin)", node=endpoint.name)

    def on_line(stream: str, raw: bytes, dropped: int) -> None:
        text = clean_line(raw, max_chars=2000, dropped=dropped)
        if not on_progress(text):
            ctx.sink.append_raw(endpoint.name, stream, raw, dropped)

    transport = ctx.transport(endpoint)
    timeout = max(0.1, min(timeout_s, ctx.deadline - time.monotonic() + 1))
    return ctx.wait(transport.run(command, on_line=on_line, stdin=stdin, timeout_s=timeout))
