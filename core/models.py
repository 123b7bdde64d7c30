"""API tokens, stored as a SHA-256 digest: the key itself is shown once, when it is issued.

A key is 32 random bytes, so a fast hash is enough (no dictionary to attack, unlike a password);
the digest column is unique and indexed, so a lookup is one index probe."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.utils import timezone


class TokenScope(models.TextChoices):
    READ = "read", "read only (safe methods)"
    WRITE = "write", "read and write"


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True, help_text="what the token is for (a dashboard, CI)")
    # The key's first characters: shown to users so they can tell their tokens apart and revoke one.
    prefix = models.CharField(max_length=12, db_index=True)
    digest = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the key, hex")
    scope = models.CharField(max_length=8, choices=TokenScope.choices, default=TokenScope.WRITE)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="empty: never expires")
    # Written at most once a minute per token, never on every request (core/tokens.py).
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user_id}, {self.scope})"

    def is_expired(self, now: datetime | None = None) -> bool:
        """Whether `expires_at` has passed at `now` (default: the current time); never when it is None."""
        return self.expires_at is not None and self.expires_at <= (now or timezone.now())

    @property
    def state(self) -> str:
        """revoked, expired or active (a revoked token reads as revoked even once it has expired)."""
        if self.revoked_at is not None:
            return "revoked"
        return "expired" if self.is_expired() else "active"


class BeatEntry(models.Model):
    """When a periodic entry of the beat registry (`pool.celery`) last ran, shared by every beat.

    Only the beat that leads (core/beat.py) sends, and it claims each run before sending by moving
    `last_run_at` with a conditional UPDATE (the value it read → the run's time), so a run is
    claimed once even by two beats that both believe they lead; a beat that takes over resumes
    from these times instead of its own, so no entry runs twice within its interval. Rows of
    entries since removed from the registry are left alone (a few bytes; an older beat of a rolling
    upgrade may still use them)."""

    name = models.CharField(max_length=200, primary_key=True)
    last_run_at = models.DateTimeField(help_text="when the run was claimed (by the database's clock)")

    class Meta:
        db_table = "core_beat_entry"
        verbose_name = "beat entry"
        verbose_name_plural = "beat entries"

    def __str__(self) -> str:
        return f"{self.name} (last run {self.last_run_at:%Y-%m-%d %H:%M:%S})"


class OidcIdentity(models.Model):
    """A user's account at an identity provider: (issuer, subject) is the identity, never the user
    name or e-mail a provider may let its users change. Created at the first single sign-on,
    which links it to the user its user-name claim names (docs/sso.md); later logins find the user
    by it."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identities")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255, help_text="the provider's `sub` claim")
    # The pool-admin role (is_staff) came from the provider's groups: a later login without an
    # admin group takes it back. A role given by hand (apitoken --admin, the admin site) is never.
    granted_admin = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "single sign-on identity"
        verbose_name_plural = "single sign-on identities"
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="oidc_identity_unique_subject")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
