"""Read-side queries for jobs: lists with filters, one job, and windows of its log."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from django.db.models import Count, Q, QuerySet
from django.http import Http404

from core.validators import INT64_MAX
from jobs.models import Job, JobLogLine, StepState

MAX_LOG_PAGE = 5000


def job_list(
    *, kind: str = "", state: str = "", node: str = "", lane: str = ""
) -> QuerySet[Job]:
    jobs = (
        Job.objects.select_related("lane", "created_by")
        .annotate(warned_steps=Count("steps", filter=Q(steps__state=StepState.WARNED)))
        .order_by("-created_at", "-id")
    )
    if kind:
        jobs = jobs.filter(kind=kind)
    if state:
        jobs = jobs.filter(state=state)
    if lane:
        jobs = jobs.filter(lane__name=lane)
    if node:
        jobs = jobs.filter(nodes__name=node).distinct()
    return jobs


def job_get(*, job_id: int) -> Job:
    return Job.objects.select_related("lane", "lane_revision", "created_by").get(pk=job_id)


def job_or_404(job_id: int) -> Job:
    """The job a page or the API names, or 404 (ninja answers Http404 with the API's shape)."""
    if job_id > INT64_MAX:  # the path converter takes any digits; the column does not
        raise Http404(f"No job #{job_id}.")
    try:
        return job_get(job_id=job_id)
    except Job.DoesNotExist:
        raise Http404(f"No job #{job_id}.") from None


@dataclass
class LogWindow:
    lines: list[JobLogLine]
    first_seq: int  # first line of the job (0 when none)
    last_seq: int  # last line written so far

    @property
    def has_earlier(self) -> bool:
        return bool(self.lines) and self.lines[0].seq > self.first_seq


def job_log_window(
    *, job: Job, after_seq: int | None = None, before_seq: int | None = None, limit: int = 1000
) -> LogWindow:
    """after_seq: the lines following it (resume); before_seq: the lines preceding it
    (earlier lines on demand); neither: the tail."""
    limit = max(1, min(limit, MAX_LOG_PAGE))
    lines = JobLogLine.objects.filter(job=job)
    first = lines.order_by("seq").values_list("seq", flat=True).first() or 0
    if after_seq is not None:
        window = list(lines.filter(seq__gt=after_seq).order_by("seq")[:limit])
    else:
        if before_seq is not None:
            lines = lines.filter(seq__lt=before_seq)
        window = list(lines.order_by("-seq")[:limit])[::-1]
    job_last = Job.objects.filter(pk=job.pk).values_list("last_seq", flat=True).first() or 0
    return LogWindow(window, first, max(job_last, window[-1].seq if window else 0))


def job_log_iter(*, job: Job, chunk: int = 5000) -> Iterator[JobLogLine]:
    """Every line in order, fetched in chunks (the full download)."""
    seq = 0
    while True:
        rows = list(JobLogLine.objects.filter(job=job, seq__gt=seq).order_by("seq")[:chunk])
        if not rows:
            return
        yield from rows
        seq = rows[-1].seq


@dataclass
class LogSearch:
    lines: list[JobLogLine]
    total: int  # every matching line, even past the limit


def job_log_search(*, job: Job, text: str, limit: int = 200) -> LogSearch:
    """Lines containing `text` (case-insensitive), first ones first, across the whole log."""
    matches = JobLogLine.objects.filter(job=job, text__icontains=text)
    return LogSearch(list(matches.order_by("seq")[: max(1, min(limit, MAX_LOG_PAGE))]), matches.count())
