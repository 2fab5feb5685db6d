"""The job log socket (the AWX lesson): authenticate, check the role, join `job-<id>`,
forward. A client resumes with {"after_seq": n}: the consumer replays the missing lines
from the database, then forwards live batches without repeating any line."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async

from core.consumers import PortalConsumer
from core.roles import Capability
from core.validators import INT64_MAX
from jobs.logsink import job_group, line_payload
from jobs.models import Job, JobLogLine
from jobs.states import job_payload, step_payload

REPLAY_CHUNK = 2000
CLOSE_NO_SUCH_JOB = 4404


@database_sync_to_async
def _job_exists(job_id: int) -> bool:
    return Job.objects.filter(pk=job_id).exists()


def _job_current(job_id: int) -> list[tuple[str, Any]]:
    job = Job.objects.select_related("lane", "created_by").filter(pk=job_id).first()
    if job is None:
        return []
    return [("job.state", job_payload(job)), *(("job.step", step_payload(step)) for step in job.steps.order_by("position"))]


@database_sync_to_async
def _lines_after(job_id: int, after_seq: int, limit: int) -> list[list[object]]:
    rows = JobLogLine.objects.filter(job_id=job_id, seq__gt=after_seq).order_by("seq")[:limit]
    return [line_payload(row) for row in rows]


class JobLogConsumer(PortalConsumer):
    capability = Capability.VIEW

    async def connect(self) -> None:
        self.job_id = int(self.scope["url_route"]["kwargs"]["job_id"])
        self.sent_seq: int | None = None  # None until the client says where it is
        await super().connect()

    async def groups_for_connection(self) -> list[str]:
        return [job_group(self.job_id)]

    async def on_accepted(self) -> None:
        if self.job_id > INT64_MAX or not await _job_exists(self.job_id):
            await self.end(CLOSE_NO_SUCH_JOB)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        after = content.get("after_seq") if isinstance(content, dict) else None
        if not isinstance(after, int) or isinstance(after, bool) or after < 0:
            await self.send_json({"event": "error", "data": {"after_seq": "must be a whole number >= 0"}})
            return
        # Replay runs before any queued live batch is handled (one message at a time), and
        # sent_seq then drops the lines a live batch repeats.
        self.sent_seq = after
        while True:
            lines = await _lines_after(self.job_id, self.sent_seq, REPLAY_CHUNK)
            if not lines:
                break
            await self.send_json({"event": "job.log", "data": {"job": self.job_id, "lines": lines, "replay": True}})
            self.sent_seq = int(str(lines[-1][0]))
            if len(lines) < REPLAY_CHUNK:
                break
        await self.send_json({"event": "job.resumed", "data": {"job": self.job_id, "last_seq": self.sent_seq}})
        # The job's state and steps as of now: a page that resumes after a drop shows them, not
        # the last it saw (a state change while the socket was down is not lost).
        await self.send_current(lambda: _job_current(self.job_id))

    async def portal_event(self, message: dict[str, Any]) -> None:
        if message["event"] != "job.log":
            await super().portal_event(message)
            return
        if self.sent_seq is None:
            return  # the client has not resumed yet: its replay will include these lines
        lines = [line for line in message["data"]["lines"] if line[0] > self.sent_seq]
        if not lines:
            return
        if lines[0][0] != self.sent_seq + 1:  # a gap (we were slow): fill it from the database
            lines = await _lines_after(self.job_id, self.sent_seq, max(REPLAY_CHUNK, len(lines) * 2))
        self.sent_seq = int(str(lines[-1][0]))
        await self.send_json({"event": "job.log", "data": {"job": self.job_id, "lines": lines}})
