"""A real OpenSSH server per simulated Spark, for the jobs tests: its own config, host key
and authorized client key, on 127.0.0.x and a free port, run as root in the foreground.

`SshdPool` keeps one such server per address for a whole session (an xdist worker): a
server holds no state of a test (the node's sim directory is in every command the portal
sends, the authorized key is the session's client key), so each test pins the same host
key in its own Node rows instead of waiting for three new servers and their keys."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"


@dataclass
class SshdServer:
    address: str
    port: int
    host_key_line: str  # "ssh-ed25519 AAAA…" as a node pins it
    process: subprocess.Popen[bytes]
    directory: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def keygen(path: Path, comment: str) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().strip() if path.suffix else Path(f"{path}.pub").read_text().strip()


def client_keypair(directory: Path) -> tuple[str, str]:
    """(private key text, public key line)."""
    directory.mkdir(parents=True, exist_ok=True)
    key = directory / "client_key"
    public = keygen(key, "portal-test-client")
    return key.read_text(), public


def _port_open(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.2) as sock:
            return sock.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def start_sshd(directory: Path, address: str, port: int, authorized_keys: str) -> SshdServer:
    directory.mkdir(parents=True, exist_ok=True)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
    host_key = directory / "ssh_host_ed25519_key"
    if host_key.exists():  # a server restarted in its directory keeps its key (still pinned)
        host_key_line = " ".join(Path(f"{host_key}.pub").read_text().split()[:2])
    else:
        host_key_line = " ".join(keygen(host_key, f"sshd-{address}").split()[:2])
    (directory / "authorized_keys").write_text(authorized_keys + "\n")
    config = directory / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"ListenAddress {address}",
                f"Port {port}",
                f"HostKey {host_key}",
                f"PidFile {directory / 'sshd.pid'}",
                f"AuthorizedKeysFile {directory / 'authorized_keys'}",
                "StrictModes no",
                "UsePAM no",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin prohibit-password",
                "MaxSessions 50",
                "MaxStartups 50:30:100",
                "LogLevel ERROR",
                # root's login shell, bash, sources ~/.bashrc before every command sent over
                # SSH while it runs at shell level 1 (Debian's SSH_SOURCE_BASHRC). A developer
                # machine's root .bashrc may not return early for non-interactive shells as a
                # Spark's does: this one ran `pyenv init` (0.12 s a command, idle) and put
                # pyenv's python3 shim first in PATH. At SHLVL=1 bash starts at level 2 and
                # skips it; the commands still run in root's login shell, as on a Spark.
                "SetEnv SHLVL=1",
                "",
            ]
        )
    )
    log = open(directory / "sshd.log", "wb")  # noqa: SIM115  (kept for the process's life)
    process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT,
                               env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    deadline = time.monotonic() + 10
    while not _port_open(address, port):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"sshd did not start on {address}:{port}: {(directory / 'sshd.log').read_text()}")
        time.sleep(0.05)
    return SshdServer(address, port, host_key_line, process, directory)


class SshdPool:
    """One sshd per address, started on first use and kept until `stop` (the session's end),
    all authorizing one client key; a server that died is started again (same key, new port)."""

    def __init__(self, directory: Path, free_port: Callable[[str], int]) -> None:
        self.directory = directory
        self.free_port = free_port
        self.client_private_key, self.client_public_key = client_keypair(directory / "client")
        self.servers: dict[str, SshdServer] = {}

    def server(self, address: str) -> SshdServer:
        server = self.servers.get(address)
        if server is None or server.process.poll() is not None:
            if server is not None:
                server.stop()
            server = start_sshd(self.directory / f"sshd-{address}", address, self.free_port(address),
                                self.client_public_key)
            self.servers[address] = server
        return server

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()
        self.servers.clear()
