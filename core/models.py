from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class Access(models.Model):
    """Holds the portal's capability permissions (no rows, no table of its own use)."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [
            ("view_portal", "Read dashboards, lanes, jobs and benchmarks"),
            ("edit_routing", "Edit and publish the semantic router"),
            ("operate_cluster", "Operate nodes, lanes, jobs and API keys"),
        ]

    def __str__(self) -> str:
        return "portal access"


class AuditEvent(models.Model):
    """Who changed what, with a before/after diff."""

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_name = models.CharField(max_length=150, blank=True)  # kept when the user is deleted
    action = models.CharField(max_length=64)  # e.g. lane.update, node.create, job.launch
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=200, blank=True)
    diff = models.JSONField(default=dict, blank=True)  # {field: [before, after]}

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["object_type", "object_id"])]

    def __str__(self) -> str:
        return f"{self.actor_name or 'system'} {self.action} {self.object_repr}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise ValueError("Audit events are immutable")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        raise ValueError("Audit events cannot be deleted")

    def changed_fields(self) -> list[tuple[str, Any, Any]]:
        return [(field, pair[0], pair[1]) for field, pair in sorted(self.diff.items())]


class PersonalAccessToken(models.Model):
    """A user's token for the management API (`Authorization: Bearer pat-…`), for scripts and
    CI. It acts as its owner with the owner's role at each request (a demoted owner's token
    loses the capability with them). The secret is shown once; only its SHA-256 is stored (it
    has 256 bits of entropy, so a plain hash is enough)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="access_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=24, help_text="First characters of the secret, shown to tell tokens apart.")
    secret_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class ExternalIdentity(models.Model):
    """A portal account signed in through the company's identity provider (OpenID Connect):
    the provider's issuer and subject (`sub`, stable for the person) find the account at every
    sign-in, so a changed e-mail or user name at the provider never moves a login to another
    account (docs/guide-admin.md, "Single sign-on")."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="external_identity")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="external_identity_unique")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
