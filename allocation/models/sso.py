"""The `sso:` section of the configuration as rows, and the memberships single sign-on gave
(imported by allocation.models, where Django finds them). allocation.services.sso reads them at
each login; allocation.config.apply_sso writes and exports them."""

from __future__ import annotations

from django.conf import settings
from django.db import models

DEFAULT_USERNAME_CLAIM = "preferred_username"
DEFAULT_GROUPS_CLAIM = "groups"


class SsoSettings(models.Model):
    """`sso: {username_claim, groups_claim, admins}`: one row (pk=1); absent, the defaults."""

    username_claim = models.CharField(max_length=200, default=DEFAULT_USERNAME_CLAIM,
                                      help_text="the claim that names a new user (preferred_username, email)")
    groups_claim = models.CharField(max_length=200, default=DEFAULT_GROUPS_CLAIM,
                                    help_text="the claim that lists the user's groups")
    admin_groups = models.JSONField(default=list, blank=True,
                                    help_text="members of any of these groups are pool admins")

    class Meta:
        verbose_name_plural = "single sign-on settings"

    def __str__(self) -> str:
        return f"user name from {self.username_claim}, groups from {self.groups_claim}"

    @classmethod
    def current(cls) -> SsoSettings:
        return cls.objects.filter(pk=1).first() or cls(pk=1)


class SsoGroupTeam(models.Model):
    """`sso.teams`: members of the provider's `group` are members of `team` (a group may give
    several teams, several groups one team)."""

    group = models.CharField(max_length=255)
    team = models.ForeignKey("allocation.Team", on_delete=models.CASCADE, related_name="sso_groups")

    class Meta:
        ordering = ["group", "team__name"]
        constraints = [models.UniqueConstraint(fields=["group", "team"], name="sso_group_team_unique")]

    def __str__(self) -> str:
        return f"{self.group} → {self.team_id}"


class SsoMembership(models.Model):
    """A team membership single sign-on made: the next login whose groups no longer give the team
    ends it. Memberships made otherwise (the config's `members:`, the admin site) have no row
    and are never ended by a login."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_memberships")
    team = models.ForeignKey("allocation.Team", on_delete=models.CASCADE, related_name="sso_memberships")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "team"], name="sso_membership_unique")]

    def __str__(self) -> str:
        return f"{self.user_id} in {self.team_id} (single sign-on)"
