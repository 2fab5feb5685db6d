"""The lane form's node picker: the registered nodes, best candidates first (online, a
good network verdict, the most memory left), so a lane is built from what exists instead
of a typed list of names."""

from __future__ import annotations

from dataclasses import dataclass

from lanes.model_files import image_presence, model_presence
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
    # Whether its last inventory holds the lane's model (complete, partial, missing, unknown)
    # and image (present, missing, unknown); "" for a lane not saved yet.
    model: str = ""
    image: str = ""

    @property
    def sort_key(self) -> tuple[int, int, int, float, str]:
        # Where the weights already are comes before memory: a copy of 156 GB takes minutes.
        return (self.state != NodeState.ONLINE, self.model not in ("complete", ""), VERDICT_RANK.get(self.verdict, 2),
                -self.free_gib, self.name)


def node_candidates(lane: Lane | None = None) -> list[NodeCandidate]:
    """Every registered node ranked for a new member of `lane` (its own use not counted)."""
    found = []
    for node in node_list():
        uses = [use for use in node_memory_use(node) if lane is None or use.lane != lane.name]
        free = node.memory_gib - node.os_reserve_gib - sum(use.gib for use in uses)
        inventory = node.inventory or {}
        found.append(NodeCandidate(
            name=node.name, state=node.state, verdict=str((node.network_report or {}).get("verdict") or ""),
            free_gib=round(free, 1), lanes=tuple(use.lane for use in uses),
            model=model_presence(inventory, lane.model_id, lane.model_revision)[0] if lane else "",
            image=image_presence(inventory, lane.image)[0] if lane else "",
        ))
    return sorted(found, key=lambda candidate: candidate.sort_key)
