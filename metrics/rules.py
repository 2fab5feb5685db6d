"""Alert rules (pure): from what the last scrape saw, which conditions hold now. The alert
service turns that into pending/open/resolved rows; thresholds come from settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Thresholds:
    kv_pct: float
    kv_for_s: float
    ttft_p95_ms: float
    node_mem_gib: float
    swap_gib: float
    scrape_failures: int


@dataclass(frozen=True)
class TargetView:
    kind: str  # lane | node
    name: str
    figures: Mapping[str, float]
    consecutive_failures: int
    error: str = ""
    lane_state: str = ""  # lanes: observed state
    lane_desired: str = ""
    rdma_degraded: bool = False  # lanes: the RDMA watchdog holds the lane degraded
    rdma_avg_us: float | None = None
    rdma_threshold_us: float | None = None
    shed: int = 0  # lanes: requests the gateway shed (503 server_busy) over the percentile window


@dataclass(frozen=True)
class BudgetView:
    """A token budget's use this period (gateway.team_services.budget_use)."""

    kind: str  # team | key
    owner: str  # the team's or key's name
    period: str  # day | month
    share: float  # the largest share used of any of its limits (1.0 = used up)
    used: str  # "812 of 1000 total tokens": its tightest limit


@dataclass(frozen=True)
class Firing:
    rule: str
    kind: str
    target: str
    message: str
    value: float | None
    for_s: float = 0.0  # the condition must hold this long before the alert opens


RULE_LABELS = {
    "lane_down": "Lane down",
    "lane_stalled": "Lane stalled",
    "kv_high": "KV cache nearly full",
    "ttft_high": "Slow first token",
    "node_memory_low": "Node memory low",
    "swap_in_use": "Swap in use",
    "scrape_failing": "Scrape failing",
    "rdma_rtt_high": "RDMA round trip high",
    "budget_high": "Token budget at 80 %",
    "budget_used_up": "Token budget used up",
    "lane_shedding": "Lane shedding",
}
BUDGET_WARN_SHARE = 0.8


def rule_table(t: Thresholds) -> list[dict[str, str]]:
    """Every rule as the alerts page shows it: what fires it, with the thresholds in force
    and the setting that changes each."""
    return [
        {"rule": "lane_down", "label": RULE_LABELS["lane_down"],
         "condition": "a lane that should serve is failed or stopped", "setting": ""},
        {"rule": "lane_stalled", "label": RULE_LABELS["lane_stalled"],
         "condition": "the guardian found the lane answering /health but making no progress (or failing its canary)",
         "setting": "PORTAL_GUARDIAN_PROGRESS_WINDOW_S, PORTAL_GUARDIAN_CANARY_INTERVAL_S"},
        {"rule": "kv_high", "label": RULE_LABELS["kv_high"],
         "condition": f"KV-cache use above {t.kv_pct:g}% for {t.kv_for_s:g} s",
         "setting": "PORTAL_METRICS_ALERT_KV_PCT, PORTAL_METRICS_ALERT_KV_FOR_S"},
        {"rule": "ttft_high", "label": RULE_LABELS["ttft_high"],
         "condition": f"TTFT p95 above {t.ttft_p95_ms:g} ms over the percentile window "
                      "(kept while requests wait with no first token in the whole window)",
         "setting": "PORTAL_METRICS_ALERT_TTFT_P95_MS, PORTAL_METRICS_PERCENTILE_WINDOW_S"},
        {"rule": "node_memory_low", "label": RULE_LABELS["node_memory_low"],
         "condition": f"MemAvailable below {t.node_mem_gib:g} GiB", "setting": "PORTAL_METRICS_ALERT_NODE_MEM_GIB"},
        {"rule": "swap_in_use", "label": RULE_LABELS["swap_in_use"],
         "condition": f"more than {t.swap_gib:g} GiB of swap in use", "setting": "PORTAL_METRICS_ALERT_SWAP_GIB"},
        {"rule": "scrape_failing", "label": RULE_LABELS["scrape_failing"],
         "condition": f"{t.scrape_failures} failed scrapes in a row", "setting": "PORTAL_METRICS_ALERT_SCRAPE_FAILURES"},
        {"rule": "rdma_rtt_high", "label": RULE_LABELS["rdma_rtt_high"],
         "condition": "the RDMA watchdog holds the lane degraded (its moving average above its threshold)",
         "setting": "the lane's watchdog (Fabric)"},
        {"rule": "budget_high", "label": RULE_LABELS["budget_high"],
         "condition": f"a team's or key's token budget {BUDGET_WARN_SHARE:.0%} used this day or month",
         "setting": "the budget (Teams)"},
        {"rule": "budget_used_up", "label": RULE_LABELS["budget_used_up"],
         "condition": "a team's or key's token budget used up: its requests get 429 budget_exceeded",
         "setting": "the budget (Teams)"},
        {"rule": "lane_shedding", "label": RULE_LABELS["lane_shedding"],
         "condition": "the gateway answered 503 server_busy (the lane's fair queue full, or a wait too long) "
                      "over the percentile window",
         "setting": "PORTAL_GATEWAY_FAIR_MAX_QUEUE, PORTAL_GATEWAY_FAIR_MAX_WAIT_S, PORTAL_METRICS_PERCENTILE_WINDOW_S"},
    ]


def budget_rules(budgets: list[BudgetView]) -> list[Firing]:
    """At 80 % a warning, at 100 % a second alert: each opens once per budget and period (the
    next period's empty count resolves them)."""
    firing: list[Firing] = []
    for b in budgets:
        target = f"{b.owner[:50]} per {b.period}"
        per = "daily" if b.period == "day" else "monthly"
        if b.share >= 1.0:
            firing.append(Firing("budget_used_up", b.kind, target,
                                 f"{b.kind} {b.owner}: {per} token budget used up ({b.used})", b.share * 100))
        if b.share >= BUDGET_WARN_SHARE:
            firing.append(Firing("budget_high", b.kind, target,
                                 f"{b.kind} {b.owner}: {per} token budget {b.share:.0%} used ({b.used})",
                                 b.share * 100))
    return firing


def firing_rules(targets: list[TargetView], t: Thresholds) -> list[Firing]:
    firing: list[Firing] = []
    for target in targets:
        f = target.figures
        if target.consecutive_failures >= t.scrape_failures:
            firing.append(Firing("scrape_failing", target.kind, target.name,
                                 f"{target.kind} {target.name}: {target.consecutive_failures} scrapes failed ({target.error})",
                                 float(target.consecutive_failures)))
        if target.kind == "lane":
            if target.lane_desired == "serving" and target.lane_state in ("failed", "stopped"):
                firing.append(Firing("lane_down", "lane", target.name,
                                     f"lane {target.name} should serve but is {target.lane_state}", None))
            if target.lane_state == "stalled":
                firing.append(Firing("lane_stalled", "lane", target.name,
                                     f"lane {target.name} answers /health but makes no progress (guardian)", None))
            if target.rdma_degraded:
                # Seed 000's watchdog: above 12 us between the Sparks the lane runs degraded.
                avg = target.rdma_avg_us
                firing.append(Firing("rdma_rtt_high", "lane", target.name,
                                     f"lane {target.name}: RDMA round trip {avg or 0:.1f} us"
                                     f" (above {target.rdma_threshold_us or 0:g} us), degraded context", avg))
            if target.shed:
                firing.append(Firing("lane_shedding", "lane", target.name,
                                     f"lane {target.name}: {target.shed} requests shed (503 server_busy): "
                                     "its fair queue is full", float(target.shed)))
            kv = f.get("kv_pct")
            if kv is not None and kv > t.kv_pct:
                firing.append(Firing("kv_high", "lane", target.name,
                                     f"lane {target.name}: KV cache {kv:.0f}% (above {t.kv_pct:g}%)", kv, t.kv_for_s))
            ttft = f.get("ttft_p95_ms")
            if ttft is not None and ttft > t.ttft_p95_ms:
                firing.append(Firing("ttft_high", "lane", target.name,
                                     f"lane {target.name}: TTFT p95 {ttft:.0f} ms (above {t.ttft_p95_ms:g} ms)", ttft))
        else:
            mem = f.get("mem_avail_gib")
            if mem is not None and mem < t.node_mem_gib:
                firing.append(Firing("node_memory_low", "node", target.name,
                                     f"node {target.name}: {mem:.1f} GiB available (below {t.node_mem_gib:g} GiB)", mem))
            swap = f.get("swap_used_gib")
            if swap is not None and swap > t.swap_gib:
                # A Spark that swaps is about to freeze (GPU memory is OS memory).
                firing.append(Firing("swap_in_use", "node", target.name,
                                     f"node {target.name}: {swap:.2f} GiB of swap in use", swap))
    return firing


def held_rules(targets: list[TargetView]) -> set[tuple[str, str, str]]:
    """(rule, kind, target) whose input is missing from a scrape that worked, while the
    condition may well persist: an open (or pending) alert on it is kept, neither refreshed
    nor resolved.

    A TTFT p95 exists when some request got its first token within the percentile window
    (METRICS_PERCENTILE_WINDOW_S, default 60 s; parsing.window_advance). Since the window
    replaced the single scrape interval, a slow lane keeps its figure between first tokens;
    what remains is a lane so stuck that no request got a first token in the whole window
    while requests are still running or waiting. It has no TTFT sample at all, yet it has
    not recovered: the alert is held (without this it resolved, then reopened as a new
    alert when a first token finally arrived). An idle lane (nothing running or waiting)
    lets the alert resolve."""
    held: set[tuple[str, str, str]] = set()
    for target in targets:
        f = target.figures
        if target.kind != "lane" or not f or "ttft_p95_ms" in f:
            continue
        if (f.get("running") or 0) + (f.get("waiting") or 0) > 0:
            held.add(("ttft_high", "lane", target.name))
    return held
