"""Live progress of a transfer: rsync's `--info=progress2` lines and the download script's
`PROGRESS` lines parsed (pure functions), and a reporter that puts bytes, rate and ETA on a
step (its detail, sent to the job page's socket) at most every PROGRESS_INTERVAL_S.

The ETA is the portal's own: bytes left over the rate of the last PROGRESS_WINDOW_S (rsync's
own figure is its instantaneous rate, which swings with every file)."""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from django.db import connection

from jobs.models import JobStep
from jobs.states import publish_step
from lanes.model_files import human

PROGRESS_INTERVAL_S = 0.5
# perf/model_sync.py: rsync's bytes jump at file boundaries; over 5 s the worst ETA error after
# the first 10% was 17%, over 30 s 14.6% (a fixed-speed link), while 30 s still follows a
# link that slows down within half a minute of a 4–7 minute copy.
PROGRESS_WINDOW_S = 30.0
# "  1,234,567  45%   12.34MB/s    0:00:12 (xfr#1, to-chk=0/3)"
RSYNC_PROGRESS = re.compile(r"^\s*([\d,]+)\s+(\d+)%\s+(\S+)\s+(\d+:\d{2}:\d{2})")


@dataclass(frozen=True)
class Progress:
    done: int
    total: int | None


def parse_rsync_progress(line: str, total: int | None) -> Progress | None:
    match = RSYNC_PROGRESS.match(line)
    if not match:
        return None
    return Progress(int(match.group(1).replace(",", "")), total)


def parse_download_progress(line: str) -> Progress | None:
    parts = line.strip().split("\t")
    if len(parts) == 3 and parts[0] == "PROGRESS" and parts[1].isdigit() and parts[2].isdigit():
        return Progress(int(parts[1]), int(parts[2]) or None)
    return None


class RateWindow:
    """Bytes per second over the last few seconds, and the ETA it gives."""

    def __init__(self, window_s: float = PROGRESS_WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.clock = clock
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, done: int) -> None:
        now = self.clock()
        self.samples.append((now, done))
        while len(self.samples) > 2 and now - self.samples[0][0] > self.window_s:
            self.samples.popleft()

    def rate(self) -> float | None:
        if len(self.samples) < 2:
            return None
        (t0, b0), (t1, b1) = self.samples[0], self.samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 and b1 >= b0 else None

    def eta_s(self, done: int, total: int | None) -> float | None:
        rate = self.rate()
        if total is None or not rate:
            return None
        return max(0.0, (total - done) / rate)


def describe(done: int, total: int | None, rate: float | None, eta: float | None) -> str:
    parts = [f"{human(done)}" + (f" of {human(total)} ({100 * done / total:.0f}%)" if total else "")]
    if rate is not None:
        parts.append(f"{human(rate)}/s")
    if eta is not None:
        parts.append(f"ETA {int(eta // 60)}:{int(eta % 60):02d}")
    return ", ".join(parts)


class StepProgress:
    """Feeds parsed progress to one step; the page shows it live. `update` runs on the
    transport's event loop, where Django's ORM may not run: a thread of its own writes the
    latest figures to the step every PROGRESS_INTERVAL_S."""

    def __init__(self, step: JobStep, total: int | None, base: int = 0) -> None:
        self.step = step
        self.total = total
        self.base = base  # bytes already there before this transfer (a resumed copy)
        self.window = RateWindow()
        self.done = base
        self.text = ""
        self.history: list[tuple[float, int, float | None]] = []  # (time, done, eta) for perf/
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._writer = threading.Thread(target=self._write_loop, name=f"progress-{step.pk}", daemon=True)
        self._writer.start()

    def update(self, progress: Progress) -> None:
        with self._lock:
            self.done = progress.done + self.base
            if progress.total is not None:
                self.total = progress.total
            self.window.add(self.done)
            eta = self.window.eta_s(self.done, self.total)
            self.history.append((time.monotonic(), self.done, eta))
            self.text = describe(self.done, self.total, self.window.rate(), eta)

    def _write_loop(self) -> None:
        written = ""
        try:
            while not self._stop.wait(PROGRESS_INTERVAL_S):
                with self._lock:
                    text = self.text
                if text and text != written:
                    written = text
                    self._save(text)
        finally:
            connection.close()

    def _save(self, text: str) -> None:
        self.step.detail = text[:2000]
        JobStep.objects.filter(pk=self.step.pk).update(detail=self.step.detail)
        publish_step(self.step)

    def publish(self, text: str) -> None:
        """The final word, from the job's thread (the writer stops first)."""
        self.close()
        self._save(text)

    def close(self) -> None:
        self._stop.set()
        self._writer.join(5)
