"""The lane form's node picker: the registered nodes, best candidates first (online, a
good network verdict, the most memory left), so a lane is built from what exists instead
of a typed list of names."""

from __future__ import annotations

from dataclasses import dataclass

from lanes.models import Lane, NodeState
from lanes.selectors import node_list, node_memory_use

# A link that failed its check is the worst place for tensor-parallel traffic.
VERDICT_RANK = {"ok": 0, "warn": 1, "": 2, "fail": 3}


@dataclass(frozen=True)
class NodeCandidate:
    name: str
    state: str
    verdict: str  # "" when never checked
    free_gib: float  # memory left after the OS reserve and the other lanes on it
    lanes: tuple[str, ...]  # other lanes already on it

    @property
    def sort_key(self) -> tuple[int, int, float, str]:
        return (self.state != NodeState.ONLINE, VERDICT_RANK.get(self.verdict, 2), -self.free_gib, self.name)


def node_candidates(lane: Lane | None = None) -> list[NodeCandidate]:
    """Every registered node ranked for a new member of `lane` (its own use not counted)."""
    found = []
    for node in node_list():
        uses = [use for use in node_memory_use(node) if lane is None or use.lane != lane.name]
        free = node.memory_gib - node.os_reserve_gib - sum(use.gib for use in uses)
        found.append(NodeCandidate(
            name=node.name, state=node.state, verdict=str((node.network_report or {}).get("verdict") or ""),
            free_gib=round(free, 1), lanes=tuple(use.lane for use in uses),
        ))
    return sorted(found, key=lambda candidate: candidate.sort_key)
