"""Judged comparison of a shadow draft (opt-in per shadow, bounded per day).

On a sampled share of the requests where the shadow draft would pick another lane than
the published version (RouterVersion.judge_share), and only for keys that opted in to
prompt storage, the draft's lane answers the same request after the client had its answer,
and a judge lane of ours grades the two answers blind: a fixed grading prompt, the two
answers in a random order as "A" and "B", a JSON verdict asked for (structured output)
and read robustly. It runs in a background task with its own timeout: it never delays or
changes the client's answer, and its tokens are ours — never counted against the key's
limits or budgets. A day's token budget (RouterVersion.judge_daily_tokens) stops it: each
call first takes its worst case (prompt bytes + max tokens: a token is at least a byte)
from one Redis counter in one atomic step, and gives back what it did not use, so the
day's spend never passes the budget."""

from __future__ import annotations

import logging
import random
import re
from typing import Any

import httpx
import orjson
from django.conf import settings

from core.db import db_call
from gateway.capture import redact_secrets
from gateway.directory import KeyInfo, LaneInfo
from gateway.models import JudgedComparison
from gateway.request import ParsedRequest
from gateway.route import AutoRoute, last_user_text, prompt_upper_bound
from gateway.wire import completion_text, usage_from
from routing.published import JudgeRule
from routing.shadow import StopRule, bound_stop_reason, judge_budget_key, shadow_stop

log = logging.getLogger(__name__)
Verdict = JudgedComparison.Verdict

JUDGE_MAX_TOKENS = 200
ANSWER_CHARS = 6000  # each answer shown to the judge is cut to this
JUDGE_SYSTEM = (
    "You are a strict, impartial grader. You are given a user's request and two answers, A and B, "
    "written by two different assistants. Judge which answer serves the request better: correctness first, "
    "then completeness, then clarity. Length is not quality, and the order of the answers means nothing. "
    'Reply with one JSON object only: {"winner": "A" | "B" | "tie", "reason": "<one short sentence>"}.'
)
VERDICT_SCHEMA = {
    "type": "object",
    "properties": {"winner": {"type": "string", "enum": ["A", "B", "tie"]}, "reason": {"type": "string"}},
    "required": ["winner", "reason"],
}
_WINNER = re.compile(r"""["']?winner["']?\s*[:=]\s*["']?\s*(A|B|tie|draw|none)\b""", re.I)
_ALONE = re.compile(r"^\W*(A|B|tie)\W*$", re.I)

# Take n tokens from the day's budget unless that would pass it: the new total, or -1.
TAKE_SCRIPT = """
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local n = tonumber(ARGV[1])
if used + n > tonumber(ARGV[2]) then return -1 end
used = redis.call('INCRBY', KEYS[1], n)
redis.call('EXPIRE', KEYS[1], 172800)
return used
"""


async def budget_take(redis: Any, tokens: int, budget: int) -> bool:
    return int(await redis.eval(TAKE_SCRIPT, 1, judge_budget_key(), tokens, budget)) >= 0


async def budget_give_back(redis: Any, tokens: int) -> None:
    if tokens > 0:
        await redis.decrby(judge_budget_key(), tokens)


def parse_verdict(text: str) -> str | None:
    """"A", "B" or "tie" from the judge's reply: its JSON object, else a `winner: X` pair
    anywhere in the text, else a reply that is only the letter; None when unreadable."""
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        try:
            winner = orjson.loads(text[start:end + 1]).get("winner")
        except (orjson.JSONDecodeError, AttributeError):
            winner = None
        if isinstance(winner, str) and winner.strip().lower() in ("a", "b", "tie"):
            return winner.strip().upper() if winner.strip().lower() != "tie" else "tie"
    found = _WINNER.search(text) or _ALONE.match(text.strip())
    if not found:
        return None
    word = found.group(1).lower()
    return word.upper() if word in ("a", "b") else "tie"


def judge_body(model: str, question: str, first: str, second: str) -> dict[str, Any]:
    user = (f"## Request\n{question[:ANSWER_CHARS]}\n\n## Answer A\n{first[:ANSWER_CHARS]}\n\n"
            f"## Answer B\n{second[:ANSWER_CHARS]}\n\nWhich answer is better? Reply with the JSON object only.")
    return {"model": model, "messages": [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}],
            "max_tokens": JUDGE_MAX_TOKENS, "temperature": 0, "stream": False,
            "response_format": {"type": "json_schema", "json_schema": {"name": "verdict", "schema": VERDICT_SCHEMA}}}


def draft_body(body: dict[str, Any], model: str) -> dict[str, Any]:
    """The client's request for the draft's lane: one whole answer, at most the client's own
    max tokens (and ROUTER_JUDGE_ANSWER_MAX_TOKENS)."""
    out = {**body, "model": model, "stream": False, "n": 1}
    requested = out.pop("max_completion_tokens", None) or out.get("max_tokens")
    cap = settings.ROUTER_JUDGE_ANSWER_MAX_TOKENS
    out["max_tokens"] = min(requested, cap) if isinstance(requested, int) and requested > 0 else cap
    out.pop("stream_options", None)
    return out


class _Spent(Exception):
    """The day's budget cannot cover the next call."""


async def _ask(client: httpx.AsyncClient, redis: Any, lane: LaneInfo, body: dict[str, Any],
               budget: int) -> tuple[str, int]:
    """One whole answer from a serving replica of the lane, its worst case taken from the
    budget first and the unused part given back: (text, tokens used)."""
    content = orjson.dumps(body)
    reserved = prompt_upper_bound(len(content), body)
    if not await budget_take(redis, reserved, budget):
        raise _Spent
    used = reserved  # unknown usage: what was taken stays spent
    try:
        replica = next(r for r in lane.replicas if r.serving)
        response = await client.post(f"{replica.base_url}/v1/chat/completions", content=content,
                                     headers={"content-type": "application/json"},
                                     timeout=settings.ROUTER_JUDGE_TIMEOUT_S)
        if response.status_code != 200:
            raise RuntimeError(f"{lane.name} answered {response.status_code}")
        payload = orjson.loads(response.content)
        usage = usage_from(payload)
        if usage.prompt_tokens is not None and usage.completion_tokens is not None:
            used = min(reserved, usage.prompt_tokens + usage.completion_tokens)
        return completion_text(payload), used
    finally:
        await budget_give_back(redis, reserved - used)


async def judged_comparison(*, client: httpx.AsyncClient, redis: Any, lanes: dict[str, LaneInfo],
                            body: dict[str, Any], published_text: str, request_id: str, published_lane: str,
                            draft_lane: str, version: int, rule: JudgeRule) -> None:
    row: dict[str, Any] = {"request_id": request_id, "router_version": version, "published_lane": published_lane,
                           "draft_lane": draft_lane, "judge_lane": rule.lane, "draft_first": random.random() < 0.5}
    try:
        draft, judge = lanes.get(draft_lane), lanes.get(rule.lane)
        if draft is None or judge is None or not draft.serving or not judge.serving:
            raise RuntimeError(f"{draft_lane if draft is None or not draft.serving else rule.lane} is not serving")
        draft_text, row["answer_tokens"] = await _ask(client, redis, draft, draft_body(body, draft.public_model_name),
                                                      rule.daily_tokens)
        first, second = (draft_text, published_text) if row["draft_first"] else (published_text, draft_text)
        reply, row["judge_tokens"] = await _ask(
            client, redis, judge, judge_body(judge.public_model_name, last_user_text(body), first, second),
            rule.daily_tokens)
        winner = parse_verdict(reply)
        row["reason"] = redact_secrets(reply)[:300]  # the judge may quote the prompt: stored like a prompt
        row["verdict"] = (Verdict.UNPARSED if winner is None else Verdict.TIE if winner == "tie"
                          else Verdict.DRAFT if (winner == "A") == row["draft_first"] else Verdict.PUBLISHED)
    except _Spent:
        row["verdict"] = Verdict.BUDGET
    except Exception as exc:  # never anyone's problem but the comparison's: record and move on
        row["verdict"], row["reason"] = Verdict.ERROR, f"{type(exc).__name__}: {exc}"[:300]
    try:
        await db_call(_save, row, rule.stop)
    except Exception:
        log.exception("gateway: could not save a judged comparison")


def to_judge(auto: AutoRoute | None, key: KeyInfo, request: ParsedRequest, endpoint: str) -> bool:
    """Whether this request's draft answer is to be judged: the router sampled it for the
    judged comparison, the key opted in to prompt storage, a chat request of a usual size."""
    return (auto is not None and auto.judge is not None and key.log_prompts and request.large is None
            and endpoint == "chat.completions")


async def judge_after_answer(rt: Any, auto: AutoRoute, body: dict[str, Any], published_text: str, request_id: str,
                             published_lane: str) -> None:
    """After the client's answer (a background task of the gateway process)."""
    assert auto.judge is not None and auto.shadow_version is not None
    await judged_comparison(client=rt.client, redis=rt.redis, lanes=await rt.lanes.get(), body=body,
                            published_text=published_text, request_id=request_id, published_lane=published_lane,
                            draft_lane=auto.shadow_lane, version=auto.shadow_version, rule=auto.judge)


def _save(row: dict[str, Any], stop: StopRule) -> None:
    JudgedComparison.objects.create(**row)
    if row["verdict"] in (Verdict.DRAFT, Verdict.PUBLISHED):
        judged = JudgedComparison.objects.filter(router_version=row["router_version"])
        wins = judged.filter(verdict=Verdict.DRAFT).count()
        reason = bound_stop_reason(stop, "win_rate", wins, wins + judged.filter(verdict=Verdict.PUBLISHED).count())
        if reason:
            shadow_stop(row["router_version"], reason)
