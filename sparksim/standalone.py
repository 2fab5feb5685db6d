"""Start one engine as a child process and wait for it: the helper tests and benches use."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


@dataclass
class EngineHandle:
    process: subprocess.Popen[bytes]
    host: str
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def health_status(self) -> int | None:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                return int(response.status)
        except urllib.error.HTTPError as error:
            return int(error.code)
        except OSError:
            return None

    def wait_healthy(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.health_status() != 200:
            if self.process.poll() is not None:
                raise RuntimeError(f"engine exited with {self.process.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"engine not healthy after {timeout}s:\n{self.log()}")
            time.sleep(0.02)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 10.0) -> int:
        """SIGINT (graceful, like vLLM), then SIGKILL if it lingers."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return int(self.process.returncode)


def start_engine(
    model: str,
    log_path: Path,
    *extra: str,
    host: str = "127.0.0.1",
    port: int | None = None,
    time_scale: float = 0.01,
    wait: bool = True,
) -> EngineHandle:
    """`python -m sparksim engine --model M --port P ...`; extra are vllm/--sim-* flags."""
    port = port or free_port(host)
    command = [sys.executable, "-m", "sparksim", "engine", "--model", model, "--host", host,
               "--port", str(port), "--time-scale", str(time_scale), *extra]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PACKAGE_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    with log_path.open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env=env)
    handle = EngineHandle(process, host, port, log_path)
    if wait:
        try:
            handle.wait_healthy()
        except BaseException:
            handle.stop()
            raise
    return handle
