"""Management API of the router's lifecycle (/api/router/...): its versions, activating one
(the publish page's step: a draft, or a retired version back) and reverting to the version
active before. Every role reads; team leads and admins (EDIT_ROUTING) change. The same
services as the pages (routing.services): the same rules, the same audit, the same 422
naming the field. The shadow run is the gateway's API (gateway/api.py)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Path, Router

from core.api import can_edit_routing
from core.validators import INT32_MAX
from routing.learned import LearnedHead
from routing.models import Prototype, RouterVersion
from routing.schemas import ActivatedOut, ChangesOut, RevertPreviewOut, VersionOut
from routing.selectors import published_version, version_changes, version_list, version_or_404
from routing.services import previous_active_version, router_version_publish, router_version_revert

router = Router(tags=["router"])


def version_out(version: RouterVersion, live_prototypes: int | None = None) -> dict[str, Any]:
    """A version as the API shows it; `live_prototypes`: the enabled prototypes a draft reads
    (counted once for a list)."""
    if live_prototypes is None:
        live_prototypes = Prototype.objects.filter(enabled=True).count()
    learned = None
    if version.learned:
        head = LearnedHead.from_json(version.learned)
        learned = {"encoder": head.encoder, "cv_accuracy": head.cv_accuracy, "train_accuracy": head.train_accuracy,
                   "trained_at": version.learned_at}
    return {
        **{name: getattr(version, name) for name in (
            "number", "status", "note", "aggregation", "threshold", "top_k", "probability_floor", "label_lanes",
            "default_lane", "train_state", "train_error", "shadow", "created_at", "published_at")},
        "prototypes": len(version.prototypes) if version.prototypes is not None else live_prototypes,
        "learned": learned,
        "created_by": version.created_by.get_username() if version.created_by else None,
        "published_by": version.published_by.get_username() if version.published_by else None,
    }


def changes_out(version: RouterVersion, against: RouterVersion | None) -> dict[str, Any]:
    """What activating `version` changes against `against` (routing.selectors.version_changes:
    the publish and revert pages' list)."""
    changes = version_changes(version, against)
    return {"against": against.number if against else None, "to": version.number,
            "settings": {name: list(pair) for name, pair in changes.settings.items()},
            "added": changes.added, "removed": changes.removed}


@router.get("/router/versions", response=list[VersionOut])
def versions_list(request: HttpRequest) -> list[dict[str, Any]]:
    """Every version, newest first: drafts, the active (published) one, retired ones."""
    live = Prototype.objects.filter(enabled=True).count()
    return [version_out(version, live) for version in version_list()]


@router.get("/router/versions/{number}", response=VersionOut)
def versions_detail(request: HttpRequest, number: int = Path(..., ge=1, le=INT32_MAX, description="The version's number.")) -> dict[str, Any]:
    return version_out(version_or_404(number))


@router.get("/router/versions/{number}/changes", response=ChangesOut)
def versions_changes(request: HttpRequest, number: int = Path(..., ge=1, le=INT32_MAX, description="The version's number.")) -> dict[str, Any]:
    """What activating this version would change (settings, prototypes added and removed)."""
    return changes_out(version_or_404(number), published_version())


@router.post("/router/versions/{number}/activate", response=ActivatedOut, auth=can_edit_routing)
def versions_activate(request: HttpRequest, number: int = Path(..., ge=1, le=INT32_MAX, description="The version's number.")) -> dict[str, Any]:
    """Make this version the active one (a draft: its prototypes are frozen; a retired one:
    rolled back to), audited; every gateway process routes with it within a second. Refused
    (422 naming the field) for the active version, a version without a default lane, or a
    learned version whose head is not trained on its prototypes with this encoder."""
    version, before = version_or_404(number), published_version()
    activated = router_version_publish(actor=request.auth, version=version)  # type: ignore[attr-defined]
    return _step_out(activated, before)


@router.get("/router/revert", response=RevertPreviewOut)
def revert_preview(request: HttpRequest) -> dict[str, Any]:
    """What a revert would restore, and what it would change."""
    active, previous = published_version(), previous_active_version()
    return {"active": active.number if active else None, "previous": previous.number if previous else None,
            "changes": changes_out(previous, active) if previous is not None else None}


@router.post("/router/revert", response=ActivatedOut, auth=can_edit_routing)
def revert(request: HttpRequest) -> dict[str, Any]:
    """Restore the version active before the active one (audited `router.revert`); 422
    naming `status` when there is none."""
    before = published_version()
    restored = router_version_revert(actor=request.auth)  # type: ignore[attr-defined]
    return _step_out(restored, before)


def _step_out(active: RouterVersion, before: RouterVersion | None) -> dict[str, Any]:
    """The version a step made active and what it changed against the one active before (both
    versions' prototypes are frozen now, so the list is the one the confirmation showed)."""
    return {"version": version_out(version_list().get(pk=active.pk)), "changes": changes_out(active, before)}
