"""Gateway selectors: teams as each user may see them, the request log with its filters (the one filter of the request log
page and the API), API keys, mirrored samples, the draft router's shadow decisions."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Avg, Count, F, Prefetch, Q, QuerySet, Sum
from django.http import Http404
from django.utils import timezone

from core.roles import Capability, UserLike, user_can
from core.stats import percentile_nearest_rank, wilson_interval
from core.validators import has_control_characters, whole_number
from gateway.models import (
    ApiKey,
    Budget,
    CapturedPrompt,
    JudgedComparison,
    MirrorSample,
    RequestLog,
    RequestOutcome,
    RouteReason,
    Team,
)

STATUS_FILTER_RULE = "must be ok, error or an HTTP status from 100 to 599"
REQUEST_ID_RULE = "must be a request id: 1 to 40 letters, digits, '-' or '_'"
TEXT_SEARCH_RULE = "must be 2 to 200 characters without control characters"
REQUEST_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,40}")


def status_condition(status: str) -> Q:
    """The one meaning of a status filter (the page's and the API's): "ok" is every status
    below 400, "error" 400 and above, a number that status exactly."""
    if status == "ok":
        return Q(status__lt=400)
    if status == "error":
        return Q(status__gte=400)
    code = whole_number(status, 599)
    if code is None or code < 100:  # "²".isdigit() is true, and int() refuses it
        raise ValidationError({"status": STATUS_FILTER_RULE})
    return Q(status=code)


@dataclass(frozen=True)
class LogFilters:
    """The request log's filters, checked when made: a bad status or an empty time range
    raises ValidationError naming the field."""

    key_id: int | None = None
    team_id: int | None = None  # its keys' requests
    lane: str = ""
    status: str = ""  # "" | "ok" | "error" | an HTTP status (status_condition)
    route: str = ""  # "" | a RouteReason
    since: datetime | None = None  # created at or after
    until: datetime | None = None  # created before
    request_id: str = ""  # exactly this request id (the X-Request-Id the client was answered with)
    # Words that must all occur in the stored prompt (case-insensitive): only the requests of
    # keys that opted in to storing prompts (ApiKey.log_prompts) are searched.
    text: str = ""

    def __post_init__(self) -> None:
        for name in ("since", "until"):  # a time without an offset is UTC, the portal's zone
            moment = getattr(self, name)
            if moment is not None and timezone.is_naive(moment):
                object.__setattr__(self, name, timezone.make_aware(moment, UTC))
        errors: dict[str, str] = {}
        if self.status:
            try:
                status_condition(self.status)
            except ValidationError:
                errors["status"] = STATUS_FILTER_RULE
        if self.route and self.route not in RouteReason.values:
            errors["route"] = f"must be one of {', '.join(RouteReason.values)}"
        if self.request_id and not REQUEST_ID_RE.fullmatch(self.request_id):
            errors["request_id"] = REQUEST_ID_RULE
        if self.text and (not 2 <= len(self.text.strip()) <= 200 or has_control_characters(self.text)):
            errors["text"] = TEXT_SEARCH_RULE
        if self.since is not None and self.until is not None and self.since >= self.until:
            errors["until"] = "must be after since (From)"
        if errors:
            raise ValidationError(errors)


def request_log_list(*, filters: LogFilters, limit: int | None = 100,
                     before_id: int | None = None) -> QuerySet[RequestLog]:
    """Newest first; `before_id` is keyset paging (no COUNT over tens of millions of rows);
    `limit` None: every matching row (the CSV export iterates them)."""
    rows = request_log_filtered(filters).select_related("key").order_by("-id")
    if before_id is not None:
        rows = rows.filter(id__lt=before_id)
    if limit is None:
        return rows
    if filters.text:
        recent = _newest_day_first(rows, filters=filters, limit=limit, before_id=before_id)
        if recent is not None:
            return recent
    return rows[:limit]


# A row's id and created_at are given when its batch is written, so a row written this long
# before another has a smaller id (a batch's transaction lasts seconds).
WRITE_ORDER_MARGIN = timedelta(hours=1)


def _newest_day_first(rows: QuerySet[RequestLog], *, filters: LogFilters, limit: int,
                      before_id: int | None) -> QuerySet[RequestLog] | None:
    """A prompt search's page from the newest day only (one or two day partitions), when that
    day holds a whole page: PostgreSQL cannot tell how many prompts match, so over the whole
    log it gathers and sorts every match (11,000 for two common words in a month) to keep 50.
    The page is exactly the whole log's when its last row was written WRITE_ORDER_MARGIN
    after the day's start: every row left out is older, so its id is smaller. Else None: the
    whole log is searched (few matches: the trigram index finds them)."""
    end = filters.until or timezone.now()
    if before_id is not None:
        before = RequestLog.objects.filter(id=before_id).values_list("created_at", flat=True).first()
        if before is None:
            return None
        end = min(end, before + WRITE_ORDER_MARGIN)
    start = end - timedelta(days=1)
    if filters.since is not None and filters.since >= start:
        return None  # the range is a day or less already
    page = rows.filter(created_at__gte=start)[:limit]
    found = list(page)  # kept as the queryset's results
    if len(found) == limit and found[-1].created_at >= start + WRITE_ORDER_MARGIN:
        return page
    return None


def request_log_filtered(filters: LogFilters) -> QuerySet[RequestLog]:
    """The one meaning of the request log's filters (page, API, CSV export), unordered."""
    rows = RequestLog.objects.all()
    if filters.request_id:
        rows = rows.filter(request_id=filters.request_id)  # its index: requestlog_request_id
    if filters.text:
        # The opted-in keys' ids, read first (a handful): the request log is then read through
        # its (key, id) index newest first and stops at the page's rows, where a join to the
        # keys made PostgreSQL gather and sort every match.
        rows = rows.filter(key_id__in=list(ApiKey.objects.filter(log_prompts=True).values_list("pk", flat=True)))
        # On PostgreSQL each word is looked up in the stored prompts' trigram index (GIN on
        # UPPER(prompt_text), as icontains compares, over the rows with a prompt: gateway
        # migration 0011) instead of reading every stored prompt; SQLite reads them.
        rows = rows.exclude(prompt_text="")
        for word in filters.text.split():
            rows = rows.filter(prompt_text__icontains=word)
    if filters.key_id is not None:
        rows = rows.filter(key_id=filters.key_id)
    if filters.team_id is not None:
        rows = rows.filter(key_id__in=ApiKey.objects.filter(team_id=filters.team_id).values("pk"))
    if filters.lane:
        rows = rows.filter(lane=filters.lane)
    if filters.status:
        rows = rows.filter(status_condition(filters.status))
    if filters.route:
        rows = rows.filter(route_reason=filters.route)
    if filters.since is not None:
        rows = rows.filter(created_at__gte=filters.since)
    if filters.until is not None:
        rows = rows.filter(created_at__lt=filters.until)
    return rows


def api_key_list() -> QuerySet[ApiKey]:
    return ApiKey.objects.select_related("owner", "default_lane", "team").prefetch_related("allowed_lanes")


def teams_visible_to(user: UserLike | None) -> QuerySet[Team]:
    """The one rule of who sees a team (pages and API alike): admins every team; any other
    role the teams they are a member of (read only); an account without a role none."""
    teams = Team.objects.prefetch_related(
        "members", "allowed_lanes", Prefetch("keys", queryset=api_key_list()))
    if user_can(user, Capability.OPERATE):
        return teams
    if not user_can(user, Capability.VIEW) or user is None:
        return teams.none()
    return teams.filter(members=user.pk)


def usage_key_ids(user: UserLike | None, *, team_id: int | None = None) -> frozenset[int] | None:
    """The API keys whose usage this user may read (the usage page, its API and exports):
    None for every key (admins, no team asked), else their teams' keys, or the one team's
    asked for (team_for: 403 for another team's). A member of no team reads none."""
    if team_id is not None:
        return frozenset(ApiKey.objects.filter(team=team_for(user, team_id)).values_list("pk", flat=True))
    if user_can(user, Capability.OPERATE):
        return None
    return frozenset(ApiKey.objects.filter(team__in=teams_visible_to(user)).values_list("pk", flat=True))


def team_budgets(team: Team) -> QuerySet[Budget]:
    """The team's own budgets and its keys' (team first, then by key)."""
    return Budget.objects.filter(Q(team=team) | Q(key__team=team)).select_related("key").order_by(
        "key_id", "period")


def team_for(user: UserLike | None, team_id: int) -> Team:
    """A team this user may see: 404 when there is none, 403 when it is another team's."""
    team = teams_visible_to(user).filter(pk=team_id).first()
    if team is not None:
        return team
    if Team.objects.filter(pk=team_id).exists():
        raise PermissionDenied("You are not a member of this team.")
    raise Http404("No such team.")


def mirror_sample_list(*, limit: int = 100) -> QuerySet[MirrorSample]:
    return MirrorSample.objects.order_by("-id")[:limit]


def mirror_summary() -> dict[str, Any]:
    return dict(MirrorSample.objects.aggregate(
        samples=Count("id"), avg_divergence=Avg("divergence"),
        avg_local_ms=Avg("local_latency_ms"), avg_external_ms=Avg("external_latency_ms"),
        errors=Count("id", filter=~Q(error="")),
    ))


@dataclass(frozen=True)
class ShadowRow:
    published_lane: str
    shadow_lane: str
    count: int


def shadow_comparison(version_number: int, *, examples: int = 20) -> tuple[int, list[ShadowRow], list[RequestLog]]:
    """Requests on which the shadow draft decided: how often each (published, draft) pair
    occurred, and recent disagreements (with the prompt when the key allows logging it)."""
    rows = RequestLog.objects.filter(shadow_version=version_number)
    counted = rows.order_by().values_list("lane", "shadow_lane").annotate(n=Count("id"))  # counted by the database
    table = [ShadowRow(a, b, n) for a, b, n in sorted(counted)]
    disagreements = list(rows.exclude(shadow_lane="").exclude(lane=F("shadow_lane")).order_by("-id")[:examples]) if examples else []
    return sum(row.count for row in table), table, disagreements


@dataclass(frozen=True)
class JudgedSummary:
    """A shadow draft's judged comparisons: the draft's wins, ties and losses against the
    published version, its win rate (ties left out) with a Wilson interval, and their tokens."""

    counts: dict[str, int]
    wins: int
    ties: int
    losses: int
    win_rate: float | None
    interval: tuple[float, float] | None
    answer_tokens: int
    judge_tokens: int
    recent: list[JudgedComparison]


def judged_summary(version_number: int, *, confidence: float = 0.95) -> JudgedSummary:
    rows = JudgedComparison.objects.filter(router_version=version_number)
    counts = dict(rows.order_by().values("verdict").annotate(n=Count("id")).values_list("verdict", "n"))
    tokens = rows.aggregate(answer=Sum("answer_tokens"), judge=Sum("judge_tokens"))
    wins, ties, losses = (counts.get(v, 0) for v in ("draft", "tie", "published"))
    return JudgedSummary(counts, wins, ties, losses, wins / (wins + losses) if wins + losses else None,
                         wilson_interval(wins, wins + losses, confidence), tokens["answer"] or 0, tokens["judge"] or 0,
                         judged_list(version_number, limit=10))


def judged_list(version_number: int, *, limit: int = 50, before_id: int | None = None) -> list[JudgedComparison]:
    """A draft's judged comparisons, newest first (keyset paging: ids below `before_id`)."""
    rows = JudgedComparison.objects.filter(router_version=version_number)
    if before_id is not None:
        rows = rows.filter(id__lt=before_id)
    return list(rows.order_by("-id")[:limit])


@dataclass(frozen=True)
class OutcomeRow:
    """Rated requests of one group: success is the mean score (0-1)."""

    group: tuple[str, ...]
    count: int
    success: float
    latency_p50_ms: float | None
    completion_tokens_mean: float | None


def _outcome_rows(groups: dict[tuple[str, ...], list[tuple[float, float, int | None]]]) -> list[OutcomeRow]:
    out = []
    for group, items in sorted(groups.items()):
        tokens = [t for _, _, t in items if t is not None]
        out.append(OutcomeRow(group, len(items), sum(s for s, _, _ in items) / len(items),
                              percentile_nearest_rank([lat for _, lat, _ in items], 0.5),
                              sum(tokens) / len(tokens) if tokens else None))
    return out


def outcome_summary() -> dict[str, list[OutcomeRow]]:
    """Agents' outcomes joined to the request log: per lane × router label, per key, per task."""
    scores = dict(RequestOutcome.objects.values_list("request_id", "score"))
    tasks = dict(RequestOutcome.objects.exclude(task="").values_list("request_id", "task"))
    by_lane: dict[tuple[str, ...], list[tuple[float, float, int | None]]] = {}
    by_key: dict[tuple[str, ...], list[tuple[float, float, int | None]]] = {}
    by_task: dict[tuple[str, ...], list[tuple[float, float, int | None]]] = {}
    rows = (RequestLog.objects.filter(request_id__in=list(scores))
            .values_list("request_id", "lane", "route_label", "key__name", "latency_ms", "completion_tokens"))
    for request_id, lane, label, key_name, latency, tokens in rows:
        item = (scores[request_id], latency, tokens)
        by_lane.setdefault((lane, label or "—"), []).append(item)
        by_key.setdefault((key_name or "—",), []).append(item)
        by_task.setdefault((tasks.get(request_id, "—"), lane), []).append(item)
    return {"lanes": _outcome_rows(by_lane), "keys": _outcome_rows(by_key), "tasks": _outcome_rows(by_task)}


def captured_prompts_with_outcomes(*, limit: int = 5000) -> tuple[list[str], list[str], list[float | None]]:
    """The captured prompts (newest first), the lane that served each, and its outcome score."""
    rows = list(CapturedPrompt.objects.order_by("-id").values_list("request_id", "text", "lane")[:limit])
    scores = dict(RequestOutcome.objects.filter(request_id__in=[r[0] for r in rows]).values_list("request_id", "score"))
    return [r[1] for r in rows], [r[2] for r in rows], [scores.get(r[0]) for r in rows]
