"""The lane's /metrics over one level: counter deltas between two scrapes, and the figures
derived from them (prefix-cache hit rate, preemptions, speculative acceptance). Pure: text
in, numbers out, with prometheus_client's own parser."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from metrics.parsing import counter_delta

# vLLM's counters (exposed with a _total suffix), summed over their labels.
COUNTERS = (
    "vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:num_preemptions",
    "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens",
)
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"


def counters(text: str) -> dict[str, float]:
    """Every counter of interest, summed over label sets; accepted tokens per draft
    position keyed as `<name>[<position>]`."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            name = sample.name[: -len("_total")]
            if name == PER_POSITION:
                key = f"{name}[{sample.labels.get('position', '?')}]"
            elif name in COUNTERS:
                key = name
            else:
                continue
            totals[key] = totals.get(key, 0.0) + sample.value
    return totals


def metrics_delta(before: str, after: str) -> dict[str, Any]:
    """Deltas of the counters over a level and what they mean. A counter that went down
    (the engine restarted) is reported as reset, not as a negative figure."""
    start, end = counters(before), counters(after)
    delta: dict[str, float] = {}
    resets = []
    for key in sorted(set(start) | set(end)):
        before_value, after_value = start.get(key, 0.0), end.get(key, 0.0)
        if after_value < before_value:
            resets.append(key)
        delta[key] = counter_delta(before_value, after_value)  # the scraper's reset rule
    queries = delta.get("vllm:prefix_cache_queries", 0.0)
    drafts = delta.get("vllm:spec_decode_num_drafts", 0.0)
    draft_tokens = delta.get("vllm:spec_decode_num_draft_tokens", 0.0)
    accepted = delta.get("vllm:spec_decode_num_accepted_tokens", 0.0)
    return {
        "counters": delta,
        "reset": resets,
        "prefix_cache_hit_rate": delta.get("vllm:prefix_cache_hits", 0.0) / queries if queries else None,
        "preemptions": delta.get("vllm:num_preemptions", 0.0),
        # vLLM's formulas: acceptance rate = accepted / draft tokens; mean acceptance
        # length = 1 + accepted / drafts (the bonus token).
        "spec_acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        "spec_mean_acceptance_length": 1 + accepted / drafts if drafts else None,
        # vLLM's per-position acceptance rate: drafts accepted up to each position / drafts.
        "spec_acceptance_per_position": [
            delta[f"{PER_POSITION}[{position}]"] / drafts for position in range(len(delta))
            if f"{PER_POSITION}[{position}]" in delta
        ] if drafts else None,
    }


def roce_delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Bytes each RoCE device sent and received over a level, per node. Port counters count
    4-octet words (port_xmit_data / port_rcv_data)."""
    out: dict[str, dict[str, int]] = {}
    for key, counts in after.items():
        first = before.get(key, {})
        out[key] = {
            "tx_bytes": max(0, counts.get("port_xmit_data", 0) - first.get("port_xmit_data", 0)) * 4,
            "rx_bytes": max(0, counts.get("port_rcv_data", 0) - first.get("port_rcv_data", 0)) * 4,
        }
    return out


# Read on each of the lane's nodes over its transport (bash -s). /sys is ${SPARK_SYSFS:-/sys}
# as in every probe (docs/runtime-contract.md): a simulated node points it at its own tree.
ROCE_SCRIPT = (
    "S=\"${SPARK_SYSFS:-/sys}\"; for d in \"$S\"/class/infiniband/*; do [ -d \"$d\" ] || continue; "
    "n=$(basename \"$d\"); "
    "printf 'ROCE\\t%s\\t%s\\t%s\\n' \"$n\" \"$(cat \"$d/ports/1/counters/port_xmit_data\" 2>/dev/null || echo 0)\" "
    "\"$(cat \"$d/ports/1/counters/port_rcv_data\" 2>/dev/null || echo 0)\"; done\n"
)


def parse_roce(node: str, lines: list[str]) -> dict[str, dict[str, int]]:
    found: dict[str, dict[str, int]] = {}
    for line in lines:
        parts = line.strip().split("\t")
        if len(parts) == 4 and parts[0] == "ROCE" and parts[2].isdigit() and parts[3].isdigit():
            found[f"{node}/{parts[1]}"] = {"port_xmit_data": int(parts[2]), "port_rcv_data": int(parts[3])}
    return found
