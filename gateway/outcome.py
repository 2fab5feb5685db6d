"""What happened to one gateway request: for its response headers, its log row and its
idempotency record."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

from gateway.route import AutoRoute
from gateway.wire import Usage

SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]


@dataclass
class Outcome:
    """What happened, for the response headers, the log row and the idempotency record."""

    request_id: str
    started: float
    lane: str = ""
    replica: int | None = None  # the replica the request was sent to
    reason: str = ""
    score: float | None = None
    label: str = ""
    status: int = 0
    error_code: str = ""
    sent_upstream: bool = False
    usage: Usage = field(default_factory=Usage)
    usage_source: str = ""  # "" = the lane's own usage; "tokenize" or "estimate" = counted by the gateway
    ttft_ms: float | None = None
    upstream_ms: float | None = None
    queue_ms: float | None = None  # waited for a slot of the lane (gateway.fair)
    priority: str = ""  # its class on a full lane (gateway.fair)
    engine_priority: int | None = None  # vLLM's `priority` sent to a lane in priority mode (gateway.fair)
    keep_answer: bool = False  # an Idempotency-Key or a mirrored sample needs the answer afterwards
    gone: asyncio.Event = field(default_factory=asyncio.Event)  # the client disconnected
    answered: bool = False  # the last byte of the answer is being sent
    mirror: bool = False  # sampled for mirrored traffic
    judged: bool = False  # the shadow draft's lane answers too, and a judge grades both (gateway.judge)
    record: bytes | None = None  # the answer, as an idempotency record
    auto: AutoRoute | None = None  # model="auto": the router's decision

    def router_columns(self) -> dict[str, object]:
        auto = self.auto
        if auto is None:
            return {}
        return {"route_prototype": auto.prototype, "router_version": auto.version,
                "shadow_version": auto.shadow_version, "shadow_lane": auto.shadow_lane,
                "shadow_label": auto.shadow_label, "shadow_score": auto.shadow_score}

    def headers(self) -> list[tuple[bytes, bytes]]:
        out = [(b"x-request-id", self.request_id.encode())]
        if self.lane:
            out.append((b"x-spark-lane", self.lane.encode()))
            out.append((b"x-spark-route-reason", self.reason.encode()))
            if self.replica is not None:
                out.append((b"x-spark-lane-replica", str(self.replica).encode()))
            if self.score is not None:
                out.append((b"x-spark-route-score", f"{self.score:.4f}".encode()))
            if self.label:
                out.append((b"x-spark-route-label", self.label.encode()))
            if self.auto is not None and self.auto.version is not None:
                out.append((b"x-spark-router-version", str(self.auto.version).encode()))
                if self.auto.affinity:
                    out.append((b"x-spark-route-affinity", b"conversation"))
        return out


def new_request_id() -> str:
    # An identifier, not a secret: the PRNG is ~10× cheaper than os.urandom per request.
    return f"req-{random.getrandbits(96):024x}"


def make_record(status: int, kind: bytes, lane: str, body: bytes) -> bytes:
    """Idempotency record: b"D" + status + kind (J json, S stream, X too large) + |lane| + body."""
    return b"D" + str(status).encode() + kind + b"|" + lane.encode() + b"|" + body
