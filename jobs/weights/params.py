"""Parameters of the model files kinds, each refused naming the field and the rule."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from core.validators import has_control_characters
from lanes.model_files import PATTERN, file_path_error, model_id_error, revision_error

MODEL_PARAMS = ("model_id", "revision", "include", "source", "targets", "network", "image", "bwlimit_mbps")
NETWORKS = ("fabric", "management")
MAX_PATTERNS = 20


def _names(value: Any, what: str) -> tuple[list[str], str]:
    if not isinstance(value, list) or not value or not all(isinstance(item, str) for item in value):
        return [], f"must be a non-empty list of {what}"
    if len(set(value)) != len(value):
        return [], f"must not name a {what[:-1]} twice"
    return list(value), ""


def validate_model_params(params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    clean: dict[str, Any] = {"time_limit_s": settings.JOBS_MAX_TIME_LIMIT_S}  # a 156 GB copy takes minutes
    errors: dict[str, str] = {}
    if "model_id" in params:
        problem = model_id_error(params["model_id"]) if isinstance(params["model_id"], str) else "must be text"
        if problem:
            errors["model_id"] = problem
        else:
            clean["model_id"] = params["model_id"]
    revision = params.get("revision") or "main"
    if not isinstance(revision, str) or revision_error(revision):
        errors["revision"] = revision_error(revision) if isinstance(revision, str) else "must be text"
    else:
        clean["revision"] = revision
    include = params.get("include") or []
    if not isinstance(include, list) or len(include) > MAX_PATTERNS or not all(
            isinstance(item, str) and PATTERN.match(item) and ".." not in item for item in include):
        errors["include"] = (f"must be a list of at most {MAX_PATTERNS} file patterns such as '*.safetensors' "
                             "(letters, digits, . _ - / * ? [ ])")
    else:
        clean["include"] = include
    for name in ("source", "image"):
        value = params.get(name)
        if value is None:
            continue
        if not isinstance(value, str) or not value or len(value) > 300 or has_control_characters(value):
            errors[name] = "must be text of at most 300 characters"
        else:
            clean[name] = value
    if "targets" in params:
        clean["targets"], problem = _names(params["targets"], "node names")
        if problem:
            errors["targets"] = problem
    if params.get("bwlimit_mbps") is not None:
        value = params["bwlimit_mbps"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 1 <= value <= 100_000:
            errors["bwlimit_mbps"] = "must be a number of MB/s between 1 and 100000 (rsync --bwlimit)"
        else:
            clean["bwlimit_mbps"] = float(value)
    network = params.get("network") or "fabric"
    if network not in NETWORKS:
        errors["network"] = f"must be one of {', '.join(NETWORKS)}"
    else:
        clean["network"] = network
    return clean, errors


def check_file_list(paths: list[str]) -> str:
    """'' when every path of a hub file list may reach a shell, else the first offender."""
    for path in paths:
        problem = file_path_error(path)
        if problem:
            return f"{path!r} {problem}"
    return ""
