"""Start the hub stand-in as a child process and wait until it answers (tests, perf, the demo)."""

import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from sparksim.standalone import PACKAGE_ROOT, free_port


@dataclass
class HubHandle:
    process: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def start_hub(
    root: str | Path, log_path: Path, host: str = "127.0.0.1", rate_bytes_s: float = 0.0, timeout: float = 20.0
) -> HubHandle:
    port, cdn_port = free_port(host), free_port(host)
    log = log_path.open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sparksim",
            "hub",
            "--root",
            str(root),
            "--host",
            host,
            "--port",
            str(port),
            "--cdn-port",
            str(cdn_port),
            "--rate-bytes-s",
            str(rate_bytes_s),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=PACKAGE_ROOT,
    )
    handle = HubHandle(process, f"http://{host}:{port}", log_path)
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{handle.url}/_sim/requests", timeout=1):
                return handle
        except (urllib.error.URLError, OSError):
            if process.poll() is not None or time.monotonic() > deadline:
                handle.stop()
                raise RuntimeError(f"hub stand-in did not start: {log_path.read_text(errors='replace')}") from None
            time.sleep(0.05)
