"""Existing rows: secret-looking container env values (NAME ending in _TOKEN, _KEY, _SECRET,
_PASSWORD) move into the encrypted secret_env; revisions and audit diffs keep only the mark."""

from typing import Any

from django.db import migrations

from lanes.crypto import encrypt_secret
from lanes.secrets import SECRET_MARK, is_secret_name, redact_env


def _redact_config(config: Any) -> Any:
    if isinstance(config, dict) and isinstance(config.get("container_env"), dict):
        return {**config, "container_env": redact_env(config["container_env"])}
    return config


def encrypt_existing(apps: Any, schema_editor: Any) -> None:
    Lane = apps.get_model("lanes", "Lane")
    LaneRevision = apps.get_model("lanes", "LaneRevision")
    AuditEvent = apps.get_model("portal", "AuditEvent")
    for lane in Lane.objects.all():
        env = dict(lane.container_env or {})
        moved = {name: str(value) for name, value in env.items() if is_secret_name(name) and value != SECRET_MARK}
        if moved:
            lane.secret_env = {**(lane.secret_env or {}), **{n: encrypt_secret(v) for n, v in moved.items()}}
            lane.container_env = {n: v for n, v in env.items() if n not in moved}
            lane.save(update_fields=["secret_env", "container_env"])
    for revision in LaneRevision.objects.all():
        config = _redact_config(revision.config)
        if config != revision.config:
            LaneRevision.objects.filter(pk=revision.pk).update(config=config)  # immutable save() is the model's
    for event in AuditEvent.objects.filter(object_type="lanes.lane"):
        diff = dict(event.diff or {})
        pair = diff.get("container_env")
        if isinstance(pair, list):
            redacted = [redact_env(side) if isinstance(side, dict) else side for side in pair]
            if redacted != pair:
                diff["container_env"] = redacted
                AuditEvent.objects.filter(pk=event.pk).update(diff=diff)


class Migration(migrations.Migration):
    dependencies = [("lanes", "0004_health_watcher_and_secret_env"), ("portal", "0002_roles")]
    operations = [migrations.RunPython(encrypt_existing, migrations.RunPython.noop)]
