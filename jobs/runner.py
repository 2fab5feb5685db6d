"""The one runner that wraps every job kind: conditional-UPDATE claim,
heartbeat, log streaming, cancel between steps and on the node, time limit, captured
traceback, and always a final state."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from jobs.bridge import AsyncBridge
from jobs.logsink import LogSink
from jobs.models import FINAL_STATES, Job, JobState, JobStep, StepState
from jobs.states import publish_job_state, publish_step
from jobs.transports import CommandResult, NodeEndpoint, Transport, TransportError, endpoint_for, transport_for
from lanes.models import Node, NodeState
from lanes.node_services import node_set_state
from lanes.secrets import fill_secret_env

logger = logging.getLogger(__name__)
T = TypeVar("T")


class JobFailed(Exception):
    """A step failed: the message is the job's error summary."""


class JobCancelled(Exception):
    pass


class JobTimedOut(Exception):
    pass


class JobMonitor(threading.Thread):
    """Flushes log batches, writes the heartbeat, and notices cancel requests, whatever
    the runner's thread is blocked on."""

    def __init__(self, job_id: int, sink: LogSink, cancel: threading.Event) -> None:
        super().__init__(name=f"job-{job_id}-monitor", daemon=True)
        self.job_id = job_id
        self.sink = sink
        self.cancel = cancel
        self.stopping = threading.Event()
        self.cancelled_by = ""

    def run(self) -> None:
        last_beat = last_poll = 0.0
        try:
            while not self.stopping.is_set():
                self.stopping.wait(settings.JOBS_LOG_FLUSH_S)
                try:
                    self.sink.flush()
                    now = time.monotonic()
                    if now - last_beat >= settings.JOBS_HEARTBEAT_S:
                        last_beat = now
                        self.beat()
                    if now - last_poll >= settings.JOBS_CANCEL_POLL_S:
                        last_poll = now
                        self.poll_cancel()
                except Exception:  # the runner still ends the job; never die silently here
                    logger.exception("job %s monitor", self.job_id)
        finally:
            connection.close()

    def beat(self) -> None:
        Job.objects.filter(pk=self.job_id, state=JobState.RUNNING).update(heartbeat_at=timezone.now())

    def poll_cancel(self) -> None:
        row = Job.objects.filter(pk=self.job_id).values("cancel_requested_at", "cancel_requested_by").first()
        if row and row["cancel_requested_at"] is not None and not self.cancel.is_set():
            self.cancelled_by = row["cancel_requested_by"]
            self.cancel.set()


class JobContext:
    """What a kind sees: nodes, commands, steps, log lines, cancel and the deadline."""

    def __init__(self, job: Job, sink: LogSink, cancel: threading.Event, deadline: float) -> None:
        self.job = job
        self.sink = sink
        self.cancel = cancel
        self.deadline = deadline
        self.bridge = AsyncBridge()
        self._transports: dict[str, Transport] = {}
        self._endpoints: dict[str, NodeEndpoint] = {}
        self._seen: set[str] = set()
        # Secret env values a lane job decrypted: filled into commands only as they leave for the node.
        self.secret_env: dict[str, str] = {}
        self._cleanup_until: float | None = None

    # --- logging ------------------------------------------------------------------------
    def log(self, text: str, *, node: str = "", stream: str = "system") -> None:
        for line in text.splitlines() or [""]:
            self.sink.append(node, stream, line)

    # --- cancel / deadline --------------------------------------------------------------
    def interrupted(self) -> bool:
        if self._cleanup_until is not None:  # undoing after a cancel: only its own deadline counts
            return time.monotonic() > self._cleanup_until
        return self.cancel.is_set() or time.monotonic() > self.deadline

    def check(self) -> None:
        if self._cleanup_until is not None:
            if time.monotonic() > self._cleanup_until:
                raise JobTimedOut()
            return
        if self.cancel.is_set():
            raise JobCancelled()
        if time.monotonic() > self.deadline:
            raise JobTimedOut()

    @contextmanager
    def cleanup(self, seconds: float) -> Iterator[None]:
        """After a cancel or a time-out, a kind may undo what it started (a launch stops its
        containers): commands run again, within this deadline of their own."""
        self._cleanup_until = time.monotonic() + seconds
        try:
            yield
        finally:
            self._cleanup_until = None

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while True:
            self.check()
            left = end - time.monotonic()
            if left <= 0:
                return
            if self._cleanup_until is not None:
                time.sleep(min(left, 0.2))
            else:
                self.cancel.wait(min(left, 0.2))

    def wait(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run transport work; on cancel or deadline stop it (which kills the process on
        the node), wait for that cleanup, and raise."""
        stop = threading.Event()
        future = self.bridge.submit(coro, stop)
        try:
            while True:
                try:
                    return future.result(timeout=0.1)
                except TimeoutError:
                    pass
                if self.interrupted():
                    stop.set()
                    with _suppress_all():
                        future.result(timeout=20)
                    self.check()
        except BaseException:
            # Celery's soft limit (or anything else) lands here: the command must not
            # outlive the job on the node.
            if not future.done():
                stop.set()
                with _suppress_all():
                    future.result(timeout=20)
            raise

    # --- nodes --------------------------------------------------------------------------
    def endpoint(self, node: Node) -> NodeEndpoint:
        if node.name not in self._endpoints:
            self._endpoints[node.name] = endpoint_for(node)
        return self._endpoints[node.name]

    def transport(self, endpoint: NodeEndpoint) -> Transport:
        if endpoint.name not in self._transports:
            self._transports[endpoint.name] = transport_for(endpoint)
        return self._transports[endpoint.name]

    def run(
        self,
        endpoint: NodeEndpoint,
        command: str,
        *,
        stdin: str | None = None,
        timeout_s: float = 120.0,
        capture: bool = False,
        quiet: bool = False,
    ) -> CommandResult:
        self.check()
        if not quiet:
            self.log(f"$ {command}" if stdin is None else f"$ {command}  (script on stdin)", node=endpoint.name)

        def on_line(stream: str, raw: bytes, dropped: int) -> None:
            if not quiet:
                self.sink.append_raw(endpoint.name, stream, raw, dropped)

        transport = self.transport(endpoint)
        until = self._cleanup_until if self._cleanup_until is not None else self.deadline
        timeout = max(0.1, min(timeout_s, until - time.monotonic() + 1))
        command = fill_secret_env(command, self.secret_env) if self.secret_env else command
        result = self.wait(transport.run(command, on_line=on_line, stdin=stdin, timeout_s=timeout, capture=capture))
        self._node_seen(endpoint.name)
        return result

    def _node_seen(self, name: str) -> None:
        """A node that ran a command (whatever its exit status) is online: launches and status
        jobs keep the node list and dashboard true, not only network checks. Once per job."""
        if name in self._seen:
            return
        self._seen.add(name)
        node = Node.objects.filter(name=name).first()
        if node is not None:
            node_set_state(node=node, state=NodeState.ONLINE, last_seen=timezone.now(), unless_maintenance=True)

    # --- steps --------------------------------------------------------------------------
    def declare_steps(self, steps: list[tuple[str, str, str, str]]) -> list[JobStep]:
        """(key, phase, node, title) in order; shown as pending on the page at once."""
        start = JobStep.objects.filter(job=self.job).count()
        rows = JobStep.objects.bulk_create(
            [JobStep(job=self.job, position=start + i, key=k, phase=p, node=n, title=t[:300])
             for i, (k, p, n, t) in enumerate(steps)]
        )
        for row in rows:
            publish_step(row)
        return list(JobStep.objects.filter(job=self.job, position__gte=start).order_by("position"))

    @contextmanager
    def step(self, step: JobStep) -> Iterator[JobStep]:
        """Runs a declared step: running → succeeded, or failed/cancelled on the way out.
        The body may set `step.state` (skipped, warned) before leaving."""
        self.check()
        step.state = StepState.RUNNING
        step.started_at = timezone.now()
        step.save(update_fields=["state", "started_at"])
        publish_step(step)
        self.log(f"▶ {step.title}" + (f" [{step.node}]" if step.node else ""))
        try:
            yield step
        except JobCancelled:
            self._end_step(step, StepState.CANCELLED)
            raise
        except BaseException as exc:
            if not step.detail:
                step.detail = str(exc)[:2000]
            self._end_step(step, StepState.FAILED)
            raise
        else:
            self._end_step(step, step.state if step.state != StepState.RUNNING else StepState.SUCCEEDED)

    def step_warned(self, step: JobStep, reason: str) -> None:
        """A step that ended well but whose findings need a look (a network verdict "warn"):
        shown amber with the reason; the job's outcome does not change."""
        if step.state in (StepState.FAILED, StepState.CANCELLED):
            return
        step.state = StepState.WARNED
        step.detail = "; ".join(filter(None, [step.detail, reason]))[:2000]
        step.save(update_fields=["state", "detail"])
        publish_step(step)

    def _end_step(self, step: JobStep, state: str) -> None:
        step.state = state
        step.finished_at = timezone.now()
        step.save(update_fields=["state", "finished_at", "exit_code", "detail"])
        publish_step(step)

    def close(self) -> None:
        for transport in self._transports.values():
            with _suppress_all():
                self.bridge.submit(transport.close()).result(timeout=10)
        self.bridge.stop()


def _suppress_all() -> contextlib.suppress:
    """Cleanup must not hide the job's own outcome."""
    return contextlib.suppress(BaseException)


KindFunc = Callable[[JobContext], dict[str, Any] | None]


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def job_claim(*, job_id: int, worker: str) -> bool:
    """queued → running, atomically: a redelivered task finds nothing to claim."""
    now = timezone.now()
    return bool(
        Job.objects.filter(pk=job_id, state=JobState.QUEUED).update(
            state=JobState.RUNNING, started_at=now, heartbeat_at=now, worker=worker[:200]
        )
    )


def job_execute(*, job_id: int, kinds: dict[str, KindFunc], time_limit_s: float | None = None) -> str | None:
    """Claim and run a job to a final state; returns that state (None if not claimed)."""
    close_old_connections()
    if not job_claim(job_id=job_id, worker=worker_name()):
        logger.info("job %s not claimed (already taken or not queued)", job_id)
        return None
    job = Job.objects.select_related("lane", "lane_revision", "created_by").get(pk=job_id)
    publish_job_state(job)
    sink = LogSink(job.pk, start_seq=job.last_seq)
    cancel = threading.Event()
    limit = time_limit_s or float(job.params.get("time_limit_s") or settings.JOBS_DEFAULT_TIME_LIMIT_S)
    monitor = JobMonitor(job.pk, sink, cancel)
    monitor.start()
    ctx = JobContext(job, sink, cancel, deadline=time.monotonic() + limit)
    state, error, tb, result = JobState.FAILED, "", "", dict[str, Any]()
    try:
        ctx.log(f"job #{job.pk} {job.kind} ({job.target_label}) started on {worker_name()}")
        result = kinds[job.kind](ctx) or {}
        state = JobState.SUCCEEDED
    except JobCancelled:
        state, error = JobState.CANCELLED, f"cancelled by {monitor.cancelled_by or 'a user'}"
    except JobTimedOut:
        state, error = JobState.TIMED_OUT, f"time limit of {limit:g}s reached"
    except (JobFailed, TransportError) as exc:
        state, error = JobState.FAILED, str(exc)
    except BaseException as exc:  # SoftTimeLimitExceeded, bugs: still a final state
        if type(exc).__name__ == "SoftTimeLimitExceeded":
            state, error = JobState.TIMED_OUT, "Celery soft time limit reached"
        else:
            state, error, tb = JobState.FAILED, f"{type(exc).__name__}: {exc}", traceback.format_exc()
    finally:
        ctx.log(f"job finished: {state}" + (f" — {error}" if error else ""))
        ctx.close()
        monitor.stopping.set()
        monitor.join(timeout=10)
        sink.flush()
        job_finish(job=job, state=state, error=error, tb=tb, result=result)
    return state


def job_finish(*, job: Job, state: str, error: str = "", tb: str = "", result: dict[str, Any] | None = None) -> bool:
    """Write the final state unless the reaper already declared the job lost."""
    updated = Job.objects.filter(pk=job.pk, state=JobState.RUNNING).update(
        state=state, finished_at=timezone.now(), error=error[:5000], traceback=tb, result=result or {}
    )
    job.refresh_from_db()
    job_skip_pending_steps(job=job)
    publish_job_state(job)
    return bool(updated)


_NOT_RUN: dict[str, str] = {
    JobState.CANCELLED: "not run: the job was cancelled",
    JobState.FAILED: "not run: the job failed before it",
    JobState.TIMED_OUT: "not run: the job reached its time limit",
    JobState.LOST: "not run: the job was lost",
}


def job_skip_pending_steps(*, job: Job) -> int:
    """A job that ended early (cancelled, failed, timed out, lost) never ran its later
    steps: they end `skipped`, saying why, instead of staying `pending` for ever."""
    if job.state not in FINAL_STATES:
        return 0
    why = _NOT_RUN.get(job.state, "not run")
    pending = list(JobStep.objects.filter(job=job, state=StepState.PENDING).order_by("position"))
    now = timezone.now()
    for step in pending:
        step.state, step.detail, step.finished_at = StepState.SKIPPED, why, now
    JobStep.objects.bulk_update(pending, ["state", "detail", "finished_at"])
    for step in pending:
        publish_step(step)
    return len(pending)
