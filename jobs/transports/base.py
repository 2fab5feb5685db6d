"""The one interface every transport implements: run a bash line on a node, stream its
output line by line, return the exit status, and kill it on the node when cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from jobs.logtext import LineSplitter

# (stream, raw line, bytes dropped from an over-long line)
LineCallback = Callable[[str, bytes, int], None]

# First thing every command prints on stderr: the process group to kill on cancel. The
# runner never shows it in the log.
PGID_MARKER = b"\x1epgid "


class TransportError(Exception):
    """The node could not run the command at all (unreachable, host key, auth)."""

    def __init__(self, node: str, message: str, presented_host_key: str = "") -> None:
        super().__init__(f"{node}: {message}")
        self.node = node
        # The key the server showed when none was pinned: recorded for an admin to confirm.
        self.presented_host_key = presented_host_key


class CommandTimeout(TransportError):
    pass


@dataclass
class CommandResult:
    exit_code: int
    stdout: list[str] = field(default_factory=list)  # kept only when capture=True
    stderr: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True)
class NodeEndpoint:
    """What a transport needs to know about a node (a plain copy of the Node row)."""

    name: str
    address: str
    transport: str = "local"
    ssh_port: int = 22
    ssh_user: str = "root"
    ssh_private_key: str = ""  # decrypted, in memory only
    ssh_host_key: str = ""
    sim_dir: str = ""


def sim_prefix(sim_dir: str) -> str:
    """docs/runtime-contract.md: simulated nodes shadow the real tools and /sys, /proc."""
    if not sim_dir:
        return ""
    base = sim_dir.rstrip("/")
    return (
        f"export PATH={shlex.quote(base + '/bin')}:\"$PATH\" SPARK_SYSFS={shlex.quote(base + '/sys')} "
        f"SPARK_PROCFS={shlex.quote(base + '/proc')} SPARK_HF_HOME={shlex.quote(base + '/hf')}; "
    )


def wrap_command(command: str, sim_dir: str) -> str:
    """The line bash runs: announce the process group (for remote kill), then the command
    in its own bash so `exit` inside it still lets us see the status."""
    marker = PGID_MARKER.decode()
    return f"printf '{marker}%s\\n' \"$$\" >&2; {sim_prefix(sim_dir)}{command}"


class Transport(Protocol):
    node: NodeEndpoint

    async def run(
        self,
        command: str,
        *,
        on_line: LineCallback,
        stdin: str | None = None,
        timeout_s: float = 120.0,
        capture: bool = False,
    ) -> CommandResult: ...

    async def close(self) -> None: ...


class StreamCollector:
    """Splits both streams into lines, hides the pgid marker, optionally captures."""

    def __init__(self, on_line: LineCallback, capture: bool) -> None:
        self.on_line = on_line
        self.capture = capture
        self.splitters = {"stdout": LineSplitter(), "stderr": LineSplitter()}
        self.result = CommandResult(exit_code=-1)
        self.pgid: int | None = None
        self.pgid_seen = asyncio.Event()

    def feed(self, stream: str, chunk: bytes) -> None:
        for raw, dropped in self.splitters[stream].feed(chunk):
            self._emit(stream, raw, dropped)

    def finish(self) -> None:
        for stream, splitter in self.splitters.items():
            for raw, dropped in splitter.close():
                self._emit(stream, raw, dropped)

    def _emit(self, stream: str, raw: bytes, dropped: int) -> None:
        if stream == "stderr" and self.pgid is None and raw.startswith(PGID_MARKER):
            with contextlib.suppress(ValueError):
                self.pgid = int(raw[len(PGID_MARKER) :].strip())
            self.pgid_seen.set()
            return
        if self.capture:
            target = self.result.stdout if stream == "stdout" else self.result.stderr
            target.append(raw.decode("utf-8", errors="replace").rstrip("\r\n"))
        self.on_line(stream, raw, dropped)
