"""Synchronous reads behind the watch endpoints: who is asking, what they may see, lease JSON.

These run on the feed's DB threads (`feed.in_db`), never on the event loop. They use the API's own
rules: token or session authentication, a member sees their teams' leases, a pool admin all, and
the lease JSON is the API's."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from allocation.events import LeaseChange


class HttpError(Exception):
    """An answer other than 200 from a watch endpoint: the handlers send it as the API's JSON error
    body. Defined here, below the handlers, because these reads raise it too (no import cycle)."""

    def __init__(self, status: int, code: str, message: str, headers: tuple[tuple[bytes, bytes], ...] = ()):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


@dataclass(frozen=True)
class Viewer:
    user: Any
    is_admin: bool
    team_ids: frozenset[int]

    def sees(self, change: LeaseChange) -> bool:
        return self.is_admin or change.team_id in self.team_ids


def is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def viewer_from_headers(headers: dict[str, str]) -> Viewer | None:
    """The API's authentication: `Authorization: Token KEY` (or `Bearer KEY`), else the dashboard's
    session cookie.
    None when neither names an active user; an expired or revoked token raises the handlers'
    HttpError (401 `token_expired` / `token_revoked`), as the API answers."""
    from django.conf import settings
    from django.contrib.auth import get_user

    from core.roles import is_pool_admin

    user: Any = None
    auth = headers.get("authorization", "")
    if auth.strip():
        from core.tokens import TokenRefused, key_from_authorization, token_lookup

        try:
            key = key_from_authorization(auth)
        except ValueError:
            return None
        if key is None:
            return None
        try:
            user = token_lookup(key).user  # hashed, expiring, revocable; any scope may watch
        except TokenRefused as refused:
            if refused.code == TokenRefused.code:
                return None
            raise HttpError(401, refused.code, refused.message, ((b"www-authenticate", b"Token"),)) from None
    else:
        cookies = _cookies(headers.get("cookie", ""))
        key = cookies.get(settings.SESSION_COOKIE_NAME)
        if key:
            from importlib import import_module

            store = import_module(settings.SESSION_ENGINE).SessionStore(key)
            user = get_user(_SessionRequest(store))  # type: ignore[arg-type]  # it reads request.session only
    if user is None or not user.is_active or not user.is_authenticated:
        return None
    teams = frozenset(user.teams.values_list("pk", flat=True))
    return Viewer(user=user, is_admin=is_pool_admin(user), team_ids=teams)


class _SessionRequest:
    """The one attribute `django.contrib.auth.get_user` reads."""

    def __init__(self, session: Any) -> None:
        self.session = session


def _cookies(raw: str) -> dict[str, str]:
    from http.cookies import SimpleCookie

    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw)
    except Exception:
        return {}
    return {k: m.value for k, m in jar.items()}


def lease_state_and_json(viewer: Viewer, lease_id: str) -> tuple[str | None, bytes, str]:
    """(state, JSON body, ETag) of one lease the viewer may see, or (None, b"", "") when it may not."""
    from allocation.api.lease_json import lease_etag

    state, body = _rendered(viewer, [lease_id]).get(str(uuid.UUID(lease_id)), (None, b""))
    return state, body, lease_etag(body) if state is not None else ""


def _rendered(viewer: Viewer, lease_ids: list[str]) -> dict[str, tuple[str, bytes]]:
    from allocation.api.lease_json import lease_dicts
    from core.api.renderers import JSONRenderer

    render = JSONRenderer().render
    return {str(data["id"]): (str(data["state"]), render(data))
            for data in lease_dicts(list(dict.fromkeys(lease_ids)), visible_to=viewer.user)}


def change_filter(viewer: Viewer, team: str, pool: str) -> Callable[[LeaseChange], bool]:
    """What a stream with `?team=&pool=` may carry for this viewer. Raises the handlers' HttpError
    for an unknown name or a team the viewer is not in."""
    from allocation.models import Team
    from inventory.models import Pool

    team_id = pool_id = None
    if team:
        team_id = Team.objects.filter(name=team).values_list("pk", flat=True).first()
        if team_id is None:
            raise HttpError(404, "unknown_team", f"team {team!r} does not exist")
        if not viewer.is_admin and team_id not in viewer.team_ids:
            raise HttpError(403, "not_a_member", f"you are not a member of team {team!r}")
    if pool:
        pool_id = Pool.objects.filter(name=pool).values_list("pk", flat=True).first()
        if pool_id is None:
            raise HttpError(404, "unknown_pool", f"pool {pool!r} does not exist")

    def wants(change: LeaseChange) -> bool:
        return (viewer.sees(change) and (team_id is None or change.team_id == team_id)
                and (pool_id is None or change.pool_id == pool_id))

    return wants
