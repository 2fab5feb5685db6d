"""Router read side: prototype lists, versions, what a publish would change."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet
from django.http import Http404
from django.shortcuts import get_object_or_404

from core.validators import whole_number
from routing.models import EvalPrompt, Prototype, RouterVersion, VersionStatus


def prototype_list(*, search: str = "", label: str = "", enabled: str = "") -> QuerySet[Prototype]:
    rows = Prototype.objects.all()
    if search:
        rows = rows.filter(Q(text__icontains=search) | Q(label__icontains=search))
    if label:
        rows = rows.filter(label=label)
    if enabled in ("yes", "no"):
        rows = rows.filter(enabled=enabled == "yes")
    return rows


def prototype_labels() -> list[str]:
    return sorted(set(Prototype.objects.values_list("label", flat=True)) | set(EvalPrompt.objects.values_list("label", flat=True)))


def live_prototypes() -> list[dict[str, str]]:
    return [{"text": text, "label": label}
            for text, label in Prototype.objects.filter(enabled=True).order_by("label", "id").values_list("text", "label")]


def version_prototypes(version: RouterVersion) -> list[dict[str, str]]:
    """A draft reads the enabled prototypes live; a published or retired version its frozen set."""
    return list(version.prototypes) if version.prototypes is not None else live_prototypes()


def published_version() -> RouterVersion | None:
    return RouterVersion.objects.filter(status=VersionStatus.PUBLISHED).first()


def shadow_version() -> RouterVersion | None:
    return RouterVersion.objects.filter(shadow=True, status=VersionStatus.DRAFT).first()


def version_list() -> QuerySet[RouterVersion]:
    return RouterVersion.objects.select_related("created_by", "published_by")


def eval_prompt_list() -> QuerySet[EvalPrompt]:
    return EvalPrompt.objects.all()


@dataclass(frozen=True)
class VersionChanges:
    settings: dict[str, tuple[Any, Any]]  # field: (published, this one)
    added: list[dict[str, str]]
    removed: list[dict[str, str]]


def version_changes(version: RouterVersion, against: RouterVersion | None) -> VersionChanges:
    """What publishing `version` changes compared with `against` (the published one)."""
    fields = ("threshold", "aggregation", "top_k", "label_lanes", "default_lane")
    settings = {f: (getattr(against, f) if against else None, getattr(version, f)) for f in fields}
    changed = {f: pair for f, pair in settings.items() if pair[0] != pair[1]}
    mine = {(p["text"], p["label"]) for p in version_prototypes(version)}
    theirs = {(p["text"], p["label"]) for p in version_prototypes(against)} if against else set()
    return VersionChanges(
        changed,
        [{"text": t, "label": lb} for t, lb in sorted(mine - theirs, key=lambda x: (x[1], x[0]))],
        [{"text": t, "label": lb} for t, lb in sorted(theirs - mine, key=lambda x: (x[1], x[0]))],
    )


def version_or_404(number: int | str) -> RouterVersion:
    """The version of that number (a form's text too: anything but a whole number is 404)."""
    found = number if isinstance(number, int) else whole_number(number)
    if found is None:
        raise Http404("No router version of that number.")
    return get_object_or_404(RouterVersion, number=found)
