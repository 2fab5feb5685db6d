"""SSHTransport (asyncssh): pinned host key (a mismatch fails loudly, never silently
accepted), connect timeout, keepalive, line streaming, exit status, remote kill on cancel."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
from typing import Any

import asyncssh

from jobs.transports.base import (
    CommandResult,
    CommandTimeout,
    LineCallback,
    NodeEndpoint,
    StreamCollector,
    TransportError,
    wrap_command,
)
from jobs.transports.local import PIPE_GRACE_S

# asyncssh logs every channel at INFO: too chatty for a worker that runs hundreds of commands.
logging.getLogger("asyncssh").setLevel(logging.WARNING)


def fingerprint(key: asyncssh.SSHKey) -> str:
    return str(key.get_fingerprint("sha256"))


class _PinnedHostKeyClient(asyncssh.SSHClient):
    """Accepts exactly the node's pinned key and remembers what the server presented."""

    def __init__(self, pinned: asyncssh.SSHKey) -> None:
        self.pinned = pinned
        self.presented: asyncssh.SSHKey | None = None

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:  # noqa: ARG002 (asyncssh's hook)
        self.presented = key
        return bool(key.public_data == self.pinned.public_data)


class SSHTransport:
    def __init__(self, node: NodeEndpoint, *, connect_timeout_s: float = 10.0, keepalive_s: float = 15.0) -> None:
        self.node = node
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_s = keepalive_s
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()

    # --- connection -------------------------------------------------------------------
    async def connection(self) -> asyncssh.SSHClientConnection:
        async with self._lock:
            if self._conn is None:
                self._conn = await self._connect()
            return self._conn

    async def _connect(self) -> asyncssh.SSHClientConnection:
        node = self.node
        where = f"{node.address}:{node.ssh_port}"
        pinned, client_key = await self._keys()
        client = _PinnedHostKeyClient(pinned)
        try:
            conn, _ = await asyncio.wait_for(
                asyncssh.create_connection(
                    lambda: client,
                    node.address,
                    node.ssh_port,
                    username=node.ssh_user,
                    client_keys=[client_key],
                    known_hosts=([], [], []),  # nothing trusted up front: the client callback decides
                    server_host_key_algs="default",
                    agent_path=None,
                    password=None,
                    kbdint_auth=False,
                    gss_auth=False,
                    preferred_auth="publickey",
                    config=[],
                    connect_timeout=self.connect_timeout_s,
                    login_timeout=self.connect_timeout_s,
                    keepalive_interval=self.keepalive_s,
                    keepalive_count_max=3,
                ),
                timeout=self.connect_timeout_s + 1,
            )
        except asyncssh.HostKeyNotVerifiable:
            presented = fingerprint(client.presented) if client.presented is not None else "none"
            raise TransportError(
                node.name,
                f"SSH host key mismatch at {where}: the server presented {presented}, the pinned key is "
                f"{fingerprint(pinned)}. Refusing to connect (re-pin the key only if the node was reinstalled).",
            ) from None
        except asyncssh.PermissionDenied:
            raise TransportError(
                node.name, f"SSH authentication failed for user {node.ssh_user!r} at {where}: the node's key was refused"
            ) from None
        except (TimeoutError, asyncssh.ConnectionLost) as exc:
            raise TransportError(node.name, f"unreachable: no SSH answer from {where} ({type(exc).__name__})") from None
        except OSError as exc:
            raise TransportError(node.name, f"unreachable: cannot connect to {where} ({exc.strerror or exc})") from None
        except asyncssh.Error as exc:
            raise TransportError(node.name, f"SSH failed at {where}: {exc.reason}") from None
        return conn

    async def _keys(self) -> tuple[asyncssh.SSHKey, asyncssh.SSHKey]:
        """The pinned host key and the node's private key, both checked before any connection."""
        node = self.node
        if not node.ssh_host_key.strip():
            presented = await self._presented_host_key()
            hint = (f"; the server presents {fingerprint(asyncssh.import_public_key(presented))}: "
                    "confirm it on the node page" if presented else "")
            raise TransportError(node.name, f"no pinned SSH host key: refusing to trust any{hint}",
                                 presented_host_key=presented)
        try:
            pinned = asyncssh.import_public_key(node.ssh_host_key.strip())
        except (asyncssh.KeyImportError, ValueError) as exc:
            raise TransportError(node.name, f"the pinned host key is not an OpenSSH public key ({exc})") from None
        if not node.ssh_private_key:
            raise TransportError(node.name, "no SSH private key stored for this node")
        try:
            client_key = asyncssh.import_private_key(node.ssh_private_key)
        except (asyncssh.KeyImportError, ValueError):
            raise TransportError(node.name, "the stored SSH private key cannot be read") from None
        return pinned, client_key

    async def _presented_host_key(self) -> str:
        """Read (never trust) the server's host key, for an admin to confirm."""
        try:
            key = await asyncio.wait_for(
                asyncssh.get_server_host_key(self.node.address, self.node.ssh_port, config=[]),
                timeout=self.connect_timeout_s,
            )
        except (OSError, TimeoutError, asyncssh.Error):
            return ""
        if key is None:
            return ""
        return " ".join(key.export_public_key("openssh").decode().split()[:2])

    # --- commands ---------------------------------------------------------------------
    async def run(
        self,
        command: str,
        *,
        on_line: LineCallback,
        stdin: str | None = None,
        timeout_s: float = 120.0,
        capture: bool = False,
    ) -> CommandResult:
        conn = await self.connection()
        collector = StreamCollector(on_line, capture)
        # The login shell may not be bash: run ours, in a session of its own (setsid -w
        # waits and passes the exit status on), so its pid is the process group that a
        # cancel kills on the node.
        remote = "exec setsid -w bash -c " + shlex.quote(wrap_command(command, self.node.sim_dir))
        try:
            process = await conn.create_process(remote, encoding=None)
        except asyncssh.Error as exc:
            raise TransportError(self.node.name, f"SSH channel refused: {exc.reason}") from None
        readers = [
            asyncio.ensure_future(self._pump(process.stdout, "stdout", collector)),
            asyncio.ensure_future(self._pump(process.stderr, "stderr", collector)),
        ]
        try:
            if stdin is not None:
                process.stdin.write(stdin.encode())
            process.stdin.write_eof()
            try:
                completed = await asyncio.wait_for(process.wait(), timeout=timeout_s)
            except TimeoutError:
                raise CommandTimeout(self.node.name, f"command still running after {timeout_s:g}s: killed") from None
            await asyncio.wait(readers, timeout=PIPE_GRACE_S)
        except BaseException:
            await self._kill_remote(collector, process)
            raise
        finally:
            for reader in readers:
                reader.cancel()
            collector.finish()
        if completed.exit_status is None or completed.exit_status < 0:
            signal_name = completed.exit_signal[0] if completed.exit_signal else "unknown"
            collector.result.exit_code = 128 + 9 if signal_name == "KILL" else 255
        else:
            collector.result.exit_code = int(completed.exit_status)
        return collector.result

    async def _pump(self, reader: Any, stream: str, collector: StreamCollector) -> None:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                return
            collector.feed(stream, chunk)

    async def _kill_remote(self, collector: StreamCollector, process: Any) -> None:
        """Cancel or timeout: kill the command's whole process group on the node (a
        closed channel alone leaves the remote process running)."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(collector.pgid_seen.wait(), timeout=2)
        pgid = collector.pgid
        conn = self._conn
        if pgid is not None and conn is not None:
            kill = f"kill -TERM -- -{int(pgid)} 2>/dev/null; sleep 1; kill -KILL -- -{int(pgid)} 2>/dev/null; true"
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.run(kill, check=False), timeout=10)
        with contextlib.suppress(Exception):
            process.close()

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._conn.wait_closed(), timeout=5)
            self._conn = None
