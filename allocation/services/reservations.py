"""Writes on advance reservations: create (admitted against capacity and the team's limit under
the pool's scheduling lock) and cancel. Both are audited and ask for a pass."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from allocation.audit import audit
from allocation.choices import ReservationState
from allocation.engine import lock_pool
from allocation.models import Quota, Reservation, Team
from allocation.policy import admission
from allocation.policy.types import ReservationView
from allocation.triggers import request_pass
from core.errors import Conflict, DomainError, Forbidden, NotFound
from core.roles import is_pool_admin
from inventory.models import Pool
from inventory.selectors import pool_capacity_profile

# A start this far in the past is still "now" (clocks of clients differ a little).
START_SKEW = timedelta(minutes=5)


def _invalid(field: str, message: str, code: str = "invalid") -> DomainError:
    return DomainError(f"{field}: {message}", code=code, details={field: [message]})


def _check_window(start: datetime, end: datetime, now: datetime) -> None:
    if end <= start:
        raise _invalid("end", "must be after start")
    if start < now - START_SKEW:
        raise _invalid("start", "is in the past")


def _resolve(user: Any, pool_name: str, team_name: str) -> tuple[Pool, Team]:
    pool = Pool.objects.filter(name=pool_name).first()
    if pool is None:
        raise _invalid("pool", f"pool {pool_name!r} does not exist")
    team = Team.objects.filter(name=team_name).first()
    if team is None:
        raise _invalid("team", f"team {team_name!r} does not exist")
    if not is_pool_admin(user) and not team.members.filter(pk=user.pk).exists():
        raise Forbidden(f"you are not a member of team {team_name!r}", code="not_a_member")
    return pool, team


def _admit(pool: Pool, team: Team, gpus: int, model: str, start: datetime, end: datetime) -> None:
    """Raise Conflict unless, over the window, the pool's matching capacity less the other
    overlapping reservations on those GPUs leaves `gpus`, and the team's limit leaves room for
    them beside its own overlapping reservations: the rules of
    allocation.policy.admission.admit_reservation, given views of the rows (read only as far as
    it asks). Called under the pool's lock."""

    def others() -> list[ReservationView]:
        rows = (Reservation.objects.filter(pool=pool, state=ReservationState.ACTIVE, start__lt=end, end__gt=start)
                .order_by().values_list("pk", "team__name", "model", "start", "end", "gpus"))
        return [ReservationView(str(pk), name, pool.name, n, s.timestamp(), e.timestamp(), m)
                for pk, name, m, s, e, n in rows]

    def limit() -> int | None:
        return Quota.objects.filter(team=team, pool=pool).values_list("limit", flat=True).first()

    new = ReservationView("", team.name, pool.name, gpus, start.timestamp(), end.timestamp(), model)
    refusal = admission.admit_reservation(new, pool_capacity_profile(pool.pk), others, limit)
    if refusal is None:
        return
    if refusal.code == "no_match":
        raise _invalid("model", refusal.message)
    raise Conflict(refusal.message, code=refusal.code)


def reservation_create(*, user: Any, pool: str, team: str, gpus: int, start: datetime,
                       end: datetime, model: str = "", now: datetime | None = None) -> Reservation:
    """Reserve `gpus` GPUs of `model` in `pool` for `team` over [start, end). A member reserves
    for its team, a pool admin for any. Invalid input is a DomainError naming the field; a
    window that capacity or the team's limit cannot take is a Conflict (`insufficient_capacity`,
    `over_limit`). Admitted under the pool's scheduling lock, so two creates cannot both take
    the last GPUs; nothing is written when refused."""
    now = now or timezone.now()
    if gpus < 1:
        raise _invalid("gpus", "must be at least 1")
    _check_window(start, end, now)
    pool_obj, team_obj = _resolve(user, pool, team)
    with transaction.atomic():
        lock_pool(pool_obj.pk)
        _admit(pool_obj, team_obj, gpus, model, start, end)
        reservation = Reservation.objects.create(pool=pool_obj, team=team_obj, gpus=gpus, model=model,
                                                 start=start, end=end, created_by=user, created_at=now)
        audit(actor=user.username, action="reservation.created", obj=reservation, at=now,
              message=f"{gpus} GPU(s) of {model or 'any model'} in pool {pool} for team {team} "
                      f"from {start.isoformat()} to {end.isoformat()}",
              data={"pool": pool, "team": team, "gpus": gpus, "model": model,
                    "start": start.isoformat(), "end": end.isoformat()}).save()
    transaction.on_commit(lambda: request_pass(pool_obj.pk))
    return reservation


def reservation_cancel(*, reservation_id: int, user: Any, now: datetime | None = None) -> Reservation:
    """Cancel a reservation of one of the user's teams (pool admins: any; another team's is
    Forbidden, a missing one NotFound). Cancelling a cancelled one returns it unchanged; one
    that has ended is a Conflict (`reservation_ended`). Its GPUs are free for everyone from the
    next pass."""
    now = now or timezone.now()
    with transaction.atomic():
        reservation = (Reservation.objects.select_for_update(of=("self",)).select_related("pool", "team")
                       .filter(pk=reservation_id).first())
        if reservation is None:
            raise NotFound("Not found.", code="not_found")
        if not is_pool_admin(user) and not reservation.team.members.filter(pk=user.pk).exists():
            raise Forbidden(f"you are not a member of team {reservation.team.name!r}", code="not_a_member")
        state = reservation.current_state(now)
        if state == ReservationState.CANCELLED:
            return reservation
        if state == ReservationState.ENDED:
            raise Conflict(f"reservation {reservation.pk} has ended", code="reservation_ended")
        reservation.state = ReservationState.CANCELLED
        reservation.cancelled_at, reservation.cancelled_by = now, user.username
        reservation.save(update_fields=["state", "cancelled_at", "cancelled_by"])
        audit(actor=user.username, action="reservation.cancelled", obj=reservation, at=now,
              message=f"reservation {reservation.pk} of team {reservation.team.name} cancelled").save()
    transaction.on_commit(lambda: request_pass(reservation.pool_id))
    return reservation
