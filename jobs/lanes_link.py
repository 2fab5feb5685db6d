"""The lanes services the jobs app calls (lane observed/desired state, network reports,
key decryption), with a fallback while a lanes function is missing, so that neither app
has to land first."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from django.conf import settings
from django.utils import timezone

from jobs.logsink import publish
from lanes.models import Lane, Node
from portal.broadcast import DASHBOARD_GROUP
from portal.roles import UserLike


def _lanes(module: str, name: str) -> Any:
    try:
        mod: ModuleType = importlib.import_module(f"lanes.{module}")
    except ImportError:
        return None
    return getattr(mod, name, None)


def lane_set_state(*, lane: Lane, state: str, reason: str = "") -> None:
    service = _lanes("services", "lane_set_observed_state")
    if service is not None:
        service(lane=lane, state=state, reason=reason)
        return
    Lane.objects.filter(pk=lane.pk).update(observed_state=state, state_changed_at=timezone.now())
    lane.observed_state = state
    data = {"name": lane.name, "observed_state": state, "desired_state": lane.desired_state, "reason": reason}
    publish(DASHBOARD_GROUP, "lane.state", data)
    publish(f"lane-{lane.name}", "lane.state", data)


def lane_set_desired(*, lane: Lane, state: str, actor: UserLike | None) -> None:
    service = _lanes("services", "lane_set_desired_state")
    if service is not None:
        service(lane=lane, state=state, actor=actor)
        return
    Lane.objects.filter(pk=lane.pk).update(desired_state=state)


def node_save_network_report(*, node: Node, report: Mapping[str, Any]) -> None:
    service = _lanes("services", "node_record_network_report")
    if service is not None:
        service(node=node, report=report)
        return
    Node.objects.filter(pk=node.pk).update(network_report=dict(report), network_checked_at=timezone.now())


def node_capture_host_key(*, node: Node, host_key_line: str) -> bool:
    """A job saw this host key on a node with none pinned: lanes keeps it pending until an
    admin confirms it (never trusted as is)."""
    service = _lanes("services", "node_record_captured_host_key")
    if service is None or not host_key_line:
        return False
    service(node=node, host_key_line=host_key_line)
    return True


def decrypt_private_key(token: str) -> str:
    """Fernet with settings.CREDENTIALS_KEY (lanes.crypto owns the format). An unreadable
    token gives "" and the transport then says the node has no usable key."""
    if not token:
        return ""
    decrypt = _lanes("crypto", "decrypt_private_key")
    try:
        if decrypt is not None:
            return str(decrypt(token))
        from cryptography.fernet import Fernet

        return Fernet(settings.CREDENTIALS_KEY.encode()).decrypt(token.encode()).decode()
    except Exception:  # never echo anything about the key
        return ""
