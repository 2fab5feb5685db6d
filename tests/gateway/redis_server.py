"""A real `redis-server` of the test's own (a free port, a temporary directory, no
persistence, like make run's embedded one), to restart (losing its memory) or stop."""

from __future__ import annotations

import subprocess
from pathlib import Path

import redis

from tests.conftest import free_port, wait_for


class RedisServer:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url)
        wait_for(lambda: self._answers(client), timeout=20, what="the test's redis-server to answer")
        return self

    @staticmethod
    def _answers(client: redis.Redis) -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(20)
            self.process = None

    def restart(self) -> None:
        """Stopped and started again on the same port: everything it held is gone."""
        self.stop()
        self.start()
        assert redis.Redis.from_url(self.url).dbsize() == 0
