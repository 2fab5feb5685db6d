"""Reading benchmark runs: the run list, one run's levels, two runs side by side, exports;
and the request-log window a replay sends."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, QuerySet
from django.http import Http404

from benchmarks.models import BenchmarkLevel, BenchmarkRun
from benchmarks.stats import SUMMARY_COLUMNS, SUMMARY_LABELS, thin_percentiles
from core.validators import INT64_MAX
from gateway.models import RequestLog

MAX_REPLAY_REQUESTS = 100_000
# The stored prompts a replay holds in memory at most (characters); past it, the rest of the
# window's requests are synthetic text of their recorded length.
MAX_REPLAY_TEXT_CHARS = 64 * 1024 * 1024


@dataclass(frozen=True)
class Trace:
    """A request-log window as a replay sends it: request i at offsets_s[i] from the start
    (the recorded arrival after `since`, divided by the speed), with its recorded prompt and
    output token counts."""

    offsets_s: tuple[float, ...]
    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    # Rows of the window a replay cannot send: failed, without token counts, or written in the
    # window without an arrival time (logged before arrival times were kept).
    skipped: int
    # Each request's conversation (the gateway's digest of its first messages; "" for none):
    # the turns of one conversation share their prompt's beginning, so replayed they share a
    # synthetic prefix too, and the lane's prefix cache meets them as it met the real ones.
    conversations: tuple[str, ...] = ()
    # Each request's stored prompt (keys that store prompts: secrets redacted; "" for none):
    # sent again as it was, so shared prefixes are the real ones.
    texts: tuple[str, ...] = ()

    def text(self, index: int) -> str:
        return self.texts[index] if index < len(self.texts) else ""

    @property
    def stored_count(self) -> int:
        return sum(1 for text in self.texts if text)

    def prompt_tag(self, index: int) -> str:
        """What request `index`'s synthetic prompt starts from: its conversation's, or its own."""
        conversation = self.conversations[index] if index < len(self.conversations) else ""
        return f"c{conversation}" if conversation else f"r{index}"

    @property
    def conversation_count(self) -> int:
        return len({conversation for conversation in self.conversations if conversation})

    def __len__(self) -> int:
        return len(self.offsets_s)


def _replay_rows(replay: dict[str, Any]) -> QuerySet[RequestLog]:
    since, until = datetime.fromisoformat(replay["since"]), datetime.fromisoformat(replay["until"])
    # created_at (indexed) is never before received_at: it bounds the scan from below.
    rows = RequestLog.objects.filter(created_at__gte=since, received_at__gte=since, received_at__lt=until)
    return rows.filter(lane=replay["lane"]) if replay.get("lane") else rows


def replay_trace(replay: dict[str, Any]) -> Trace:
    """The window's answered requests in arrival order (at most MAX_REPLAY_REQUESTS + 1, so a
    caller can tell a window that is too large)."""
    since = datetime.fromisoformat(replay["since"])
    speed = float(replay.get("speed") or 1.0)
    rows = _replay_rows(replay)
    usable = rows.filter(status=200, prompt_tokens__gt=0, completion_tokens__gt=0)
    picked = list(usable.order_by("received_at", "id")
                  .values_list("received_at", "prompt_tokens", "completion_tokens", "conversation", "id")
                  [:MAX_REPLAY_REQUESTS + 1])
    until = datetime.fromisoformat(replay["until"])
    unplaced = RequestLog.objects.filter(created_at__gte=since, created_at__lt=until, received_at__isnull=True)
    if replay.get("lane"):
        unplaced = unplaced.filter(lane=replay["lane"])
    skipped = rows.count() - usable.count() + unplaced.count()
    kept = [(at, prompt, output, conversation or "", row_id) for at, prompt, output, conversation, row_id in picked
            if at is not None and prompt and output]
    stored = _stored_prompts([row_id for *_, row_id in kept])
    return Trace(tuple((at - since).total_seconds() / speed for at, *_ in kept),
                 tuple(prompt for _, prompt, *_ in kept), tuple(output for _, _, output, *_ in kept), skipped,
                 tuple(conversation for _, _, _, conversation, _ in kept),
                 tuple(stored.get(row_id, "") for *_, row_id in kept))


def _stored_prompts(row_ids: list[int]) -> dict[int, str]:
    """The rows' stored prompts (only keys that store prompts have any), in arrival order up
    to MAX_REPLAY_TEXT_CHARS in all."""
    order = {row_id: position for position, row_id in enumerate(row_ids)}
    texts: dict[int, str] = {}
    held = 0
    rows = RequestLog.objects.filter(id__in=row_ids).exclude(prompt_text="").values_list("id", "prompt_text")
    for row_id, text in sorted(rows.iterator(chunk_size=500), key=lambda row: order[row[0]]):
        held += len(text)
        if held > MAX_REPLAY_TEXT_CHARS:
            break
        texts[row_id] = text
    return texts


def run_list() -> QuerySet[BenchmarkRun]:
    return (BenchmarkRun.objects.select_related("job", "job__created_by", "lane_revision")
            .annotate(levels_done=Count("levels")).order_by("-created_at", "-id"))


def run_or_404(job_id: int) -> BenchmarkRun:
    """The run of job `job_id`, for every page and API operation alike (the API answers
    Http404 in its error shape). A run's number is its job's; the path converters take any
    digits and the compare page any integer, the column a bigint: past it is no run."""
    if not 1 <= job_id <= INT64_MAX:
        raise Http404(f"No benchmark run #{job_id}.")
    try:
        return BenchmarkRun.objects.select_related("job", "lane", "lane_revision").get(job_id=job_id)
    except BenchmarkRun.DoesNotExist:
        raise Http404(f"No benchmark run #{job_id}.") from None


def level_payload(level: BenchmarkLevel) -> dict[str, Any]:
    return {
        "job": level.run.job_id, "position": level.position, "target": level.target,
        "concurrency": level.concurrency, "request_rate": level.request_rate, "label": level.level_label,
        "stats": level.stats, "metrics": level.metrics, "fabric": level.fabric, "prime": level.prime,
        "thin": thin_percentiles(int((level.stats or {}).get("completed") or 0)),
    }


def gateway_added(levels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per level measured both ways in one run: what going through the gateway added to TTFT
    (gateway minus direct) and changed in decode speed."""
    direct = {level["label"]: level["stats"] for level in levels if level["target"] == "direct"}
    rows = []
    for level in levels:
        base = direct.get(level["label"])
        # A side where nothing succeeded has no TTFT to subtract (its figures are zeros).
        if level["target"] != "gateway" or base is None or not base["completed"] or not level["stats"]["completed"]:
            continue
        stats = level["stats"]
        rows.append({
            "label": level["label"],
            "added_median_ttft_ms": stats["median_ttft_ms"] - base["median_ttft_ms"],
            "added_p95_ttft_ms": stats["p95_ttft_ms"] - base["p95_ttft_ms"],
            "added_mean_tpot_ms": stats["mean_tpot_ms"] - base["mean_tpot_ms"],
        })
    return rows


def run_payload(run: BenchmarkRun) -> dict[str, Any]:
    levels = [level_payload(level) for level in run.levels.select_related("run").order_by("position")]
    return {
        "job": run.job_id, "state": run.job.state, "lane": run.lane_name, "revision": run.revision_number,
        "label": run.label, "params": run.params, "levels_planned": run.levels_planned,
        "levels": levels, "gateway_added": gateway_added(levels),
    }


def _key(level: dict[str, Any]) -> tuple[str, str]:
    return level["target"], level["label"]


COUNT_FIGURES = ("completed", "failed", "total")


def _figure(level: dict[str, Any] | None, name: str) -> Any:
    """A level's figure, or None where it has none: a level where no request succeeded has
    counts but no latency or speed (its stats hold zeros, which are no measurement)."""
    if level is None:
        return None
    if not level["stats"].get("completed") and name not in COUNT_FIGURES:
        return None
    return level["stats"].get(name)


def compare_runs(first: BenchmarkRun, second: BenchmarkRun) -> list[dict[str, Any]]:
    """Rows of (target, level) present in either run: each summary figure of both runs and
    the change from the first to the second (absolute and relative)."""
    a = {_key(level): level for level in run_payload(first)["levels"]}
    b = {_key(level): level for level in run_payload(second)["levels"]}
    ordered = list(a) + [key for key in b if key not in a]
    rows = []
    for key in ordered:
        figures = []
        for name, unit in SUMMARY_COLUMNS:
            left = _figure(a.get(key), name)
            right = _figure(b.get(key), name)
            delta = right - left if left is not None and right is not None else None
            relative = delta / left if delta is not None and left else None
            figures.append({"name": name, "label": SUMMARY_LABELS[name], "unit": unit, "count": not unit,
                            "a": left, "b": right, "delta": delta, "relative": relative})
        rows.append({"target": key[0], "level": key[1], "figures": figures})
    return rows


# The run-level keys of `vllm bench serve --save-result`, and what they hold here.
def export_json(run: BenchmarkRun) -> dict[str, Any]:
    payload = run_payload(run)
    results = []
    for level in payload["levels"]:
        stats = {key: value for key, value in level["stats"].items() if key != "client"}
        results.append({
            "target": level["target"], "max_concurrency": level["concurrency"],
            # A replay's rate is its trace's (a number, as vLLM's field is); a concurrency level's "inf".
            "request_rate": level["request_rate"] if level["request_rate"] is not None
            else "inf" if level["concurrency"] is not None else stats.get("scheduled_request_rate", "inf"),
            "num_prompts": stats["total"], "random_input_len": run.params.get("prompt_tokens"),
            "random_output_len": run.params.get("output_tokens"), **stats,
            "client": level["stats"].get("client"), "metrics_delta": level["metrics"], "roce": level["fabric"],
            "prime": level["prime"],
        })
    return {
        "backend": "openai-chat", "endpoint_type": "openai-chat", "job": run.job_id, "lane": run.lane_name,
        "lane_revision": run.revision_number, "label": run.label, "date": run.created_at.isoformat(),
        "cache_mode": run.params.get("cache_mode"), "params": run.params, "results": results,
        "gateway_added": payload["gateway_added"],
    }


CSV_COLUMNS = ("target", "max_concurrency", "request_rate", "completed", "failed", "total", "duration",
               "request_throughput", "output_throughput", "total_token_throughput", "max_output_tokens_per_s",
               "mean_ttft_ms", "median_ttft_ms", "p95_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
               "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p95_itl_ms", "p99_itl_ms", "mean_e2el_ms",
               "median_e2el_ms", "p99_e2el_ms", "median_decode_tok_s", "mean_prefill_tok_s",
               # The client's own figures, and an open-loop level's (a rate, a replay) from its schedule:
               # empty where a level has none.
               "max_in_flight_at_lane", "connections_opened", "p95_pre_send_ms", "p99_connection_wait_ms",
               "scheduled_request_rate", "achieved_request_rate", "p99_dispatch_delay_ms",
               "median_ttft_from_schedule_ms", "p99_ttft_from_schedule_ms", "median_e2el_from_schedule_ms",
               "good_requests", "goodput_share")


def export_rows(run: BenchmarkRun) -> list[list[Any]]:
    """The CSV export: CSV_COLUMNS, then one row per level."""
    return [list(CSV_COLUMNS), *([result.get(column, "") for column in CSV_COLUMNS]
                                 for result in export_json(run)["results"])]
