"""Who a single sign-on becomes: the gpupool user, its teams and its pool-admin role, from the
provider's claims and the `sso:` section of the configuration. The dashboard's login and the CLI's
device login both end here, so both give the same account the same teams.

The user. A login is identified by (issuer, subject), never by a name the provider may let its
users change (core.models.OidcIdentity). The first login links it to the user its user-name claim
names: created without a password when none exists; an existing user without a usable password
(made by `apply` or `apitoken`) is linked; a user with a password is a local account and is
refused, so that nobody at the provider takes over a local admin by choosing its name; a user
already linked to another subject is refused. Later logins find the user by the identity alone.

Teams and role, at every login. The groups the provider sends give the teams `sso.teams` maps them
to and, through `sso.admins`, the pool-admin role (`is_staff`). What single sign-on gave it takes
back when the groups no longer give it (allocation.models.SsoMembership,
OidcIdentity.granted_admin). Memberships and roles given otherwise (the config's `members:`, the
admin site, `apitoken --admin`) are never touched by a login: a login adds, and removes only its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone

from allocation.audit import audit
from allocation.models import SsoGroupTeam, SsoMembership, SsoSettings, Team
from core.models import ApiToken, OidcIdentity
from core.oidc.claims import ClaimRefused, groups_in, username_in
from core.oidc.device import device_finish
from core.roles import is_pool_admin
from core.tokens import token_digest, token_issue

DEVICE_TOKEN_NAME = "gpupool login --sso"


@dataclass(frozen=True)
class SsoMapping:
    username_claim: str
    groups_claim: str
    teams: Mapping[str, frozenset[int]]  # provider group → team ids
    admins: frozenset[str]

    def teams_of(self, groups: frozenset[str]) -> set[int]:
        return {team for group in groups for team in self.teams.get(group, ())}


@dataclass
class SsoLogin:
    """The user a login became, and what the login changed (in words, as `apply` prints them)."""

    user: Any
    created: bool = False
    changes: list[str] = field(default_factory=list)


def sso_mapping() -> SsoMapping:
    """The `sso:` section as it stands (the defaults where it was never applied)."""
    row = SsoSettings.current()
    teams: dict[str, set[int]] = {}
    for group, team_id in SsoGroupTeam.objects.values_list("group", "team_id"):
        teams.setdefault(group, set()).add(team_id)
    return SsoMapping(row.username_claim, row.groups_claim, {g: frozenset(t) for g, t in teams.items()},
                      frozenset(row.admin_groups))


def sso_login(*, issuer: str, claims: Mapping[str, Any], via: str) -> SsoLogin:
    """The user (issuer, claims["sub"]) is, with its teams and role made to follow its groups; one
    audit event records what changed. `via` says which login (dashboard, device) for the audit.
    Raises ClaimRefused (403 `sso_refused`) for a login that cannot be, or may not be, a user."""
    mapping = sso_mapping()
    subject = str(claims.get("sub") or "")
    if not subject:
        raise ClaimRefused("the identity provider named no subject (sub)")
    groups = groups_in(claims, mapping.groups_claim)
    try:
        return _login(issuer, subject, claims, groups, mapping, via)
    except IntegrityError:
        # Two first logins of one person at once (the dashboard and the CLI): the other one made
        # the identity or the user first; this one, tried again, finds them.
        return _login(issuer, subject, claims, groups, mapping, via)


def _login(issuer: str, subject: str, claims: Mapping[str, Any], groups: frozenset[str], mapping: SsoMapping,
           via: str) -> SsoLogin:
    with transaction.atomic():
        identity = (OidcIdentity.objects.select_for_update().select_related("user")
                    .filter(issuer=issuer, subject=subject).first())
        login = SsoLogin(user=None)
        if identity is None:
            identity, login.created = _link(issuer, subject, username_in(claims, mapping.username_claim), login)
        user = login.user = identity.user
        if not user.is_active:
            raise ClaimRefused(f"the gpupool account {user.username!r} is disabled")
        _sync_teams(user, mapping.teams_of(groups), login.changes)
        _sync_admin(user, identity, bool(groups & mapping.admins), login.changes)
        identity.last_login_at = timezone.now()
        identity.save(update_fields=["granted_admin", "last_login_at"])
        audit(actor=f"user:{user.username}", action="sso.login", obj=user,
              message=f"{user.username} signed in through single sign-on ({via})"
                      + (": " + "; ".join(login.changes) if login.changes else ""),
              data={"issuer": issuer, "subject": subject, "via": via, "groups": sorted(groups),
                    "changes": login.changes}).save()
    return login


@dataclass(frozen=True)
class DeviceLogin:
    """A finished device login: a new API token (`token`, shown once) of `username`."""

    token: str
    username: str
    teams: list[str]
    pool_admin: bool
    expires_at: datetime


def sso_device_login(*, device_code: str) -> DeviceLogin:
    """Redeem a device login (core.oidc.device) once the user has signed in at the provider: the
    same user, teams and role as a dashboard login, and a new API token for the CLI that expires
    after OIDC["TOKEN_DAYS"] (so a user removed at the provider loses API access by then at the
    latest). Raises what device_finish and sso_login raise (DeviceWaiting while the user is not
    done)."""
    login = device_finish(device_code)
    result = sso_login(issuer=login.issuer, claims=login.claims, via="device")
    lifetime = timedelta(days=settings.OIDC["TOKEN_DAYS"])
    key = token_issue(user=result.user, name=DEVICE_TOKEN_NAME, expires_in=lifetime)
    issued = ApiToken.objects.get(digest=token_digest(key))
    return DeviceLogin(token=key, username=result.user.username,
                       teams=sorted(result.user.teams.values_list("name", flat=True)),
                       pool_admin=is_pool_admin(result.user), expires_at=issued.expires_at or timezone.now())


def _link(issuer: str, subject: str, username: str, login: SsoLogin) -> tuple[OidcIdentity, bool]:
    """The identity of a first login, linked to the user `username` names (see the module)."""
    user = get_user_model().objects.filter(username=username).first()
    created = user is None
    if user is None:
        user = get_user_model()(username=username)
        user.set_unusable_password()
        user.save()
        login.changes.append(f"+ user {username}")
    elif OidcIdentity.objects.filter(user=user).exists():
        raise ClaimRefused(f"the gpupool user {username!r} is already linked to another single sign-on "
                           "account; an admin must remove that link first (admin site: single sign-on identities)")
    elif user.password and user.has_usable_password():  # "" (a row made in code) opens no login either
        raise ClaimRefused(f"{username!r} is a local gpupool account with a password; an admin must disable its "
                           "password-based login before it can be reached through single sign-on")
    identity = OidcIdentity.objects.create(user=user, issuer=issuer, subject=subject)
    return identity, created


def _sync_teams(user: Any, wanted: set[int], changes: list[str]) -> None:
    """Join the teams the groups give (recorded as single sign-on's unless the user was already a
    member by other means), leave those single sign-on gave that they no longer give."""
    own = set(SsoMembership.objects.filter(user=user).values_list("team_id", flat=True))
    member_of = set(user.teams.values_list("pk", flat=True))
    names = dict(Team.objects.filter(pk__in=wanted | own).values_list("pk", "name"))
    for team_id in sorted(wanted - member_of, key=names.__getitem__):
        user.teams.add(team_id)
        SsoMembership.objects.get_or_create(user=user, team_id=team_id)
        changes.append(f"+ member of team {names[team_id]}")
    for team_id in sorted(own - wanted, key=names.__getitem__):
        if team_id in member_of:
            user.teams.remove(team_id)
            changes.append(f"- member of team {names[team_id]}")
        SsoMembership.objects.filter(user=user, team_id=team_id).delete()


def _sync_admin(user: Any, identity: OidcIdentity, wanted: bool, changes: list[str]) -> None:
    if wanted and not user.is_staff:
        user.is_staff = identity.granted_admin = True
        user.save(update_fields=["is_staff"])
        changes.append("+ pool admin")
    elif not wanted and identity.granted_admin:
        identity.granted_admin = False
        if user.is_staff:
            user.is_staff = False
            user.save(update_fields=["is_staff"])
            changes.append("- pool admin")
