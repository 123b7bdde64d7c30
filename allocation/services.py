"""Writes on leases from users and the reaper: create, release, renew, expire, lose, requeue."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Count, Max, Q
from django.utils import timezone

from allocation.choices import END_STATES, HOLDING_STATES, BindingKind, LeaseState
from allocation.events import announce_lease
from allocation.leases import lease_end, lease_free_gpus, transition
from allocation.models import Lease, PriorityClass, Quota, Team
from allocation.policy import matching
from allocation.triggers import request_pass
from inventory.choices import HostState
from inventory.models import Pool
from inventory.selectors import pool_capacity_profile
from pool.errors import Conflict, DomainError, Forbidden, NotFound

S = LeaseState


def user_is_pool_admin(user: Any) -> bool:
    return bool(getattr(user, "is_staff", False) or getattr(user, "is_superuser", False))


def actor_name(user: Any) -> str:
    return getattr(user, "username", "") or "anonymous"


def _resolve_team(user: AbstractBaseUser, team_name: str | None) -> Team:
    if team_name:
        team = Team.objects.filter(name=team_name).first()
        if team is None:
            raise NotFound(f"team {team_name!r} does not exist", code="unknown_team")
        if not user_is_pool_admin(user) and not team.members.filter(pk=user.pk).exists():
            raise Forbidden(f"you are not a member of team {team_name!r}", code="not_a_member")
        return team
    teams = list(Team.objects.filter(members=user)[:2])
    if not teams:
        raise DomainError("you are in no team; ask an admin to add you, or name a team",
                          code="no_team")
    if len(teams) > 1:
        raise DomainError("you are in several teams: say which one with 'team'", code="team_required")
    return teams[0]


def _resolve_priority(name: str | None) -> PriorityClass:
    if name:
        pc = PriorityClass.objects.filter(name=name).first()
        if pc is None:
            raise NotFound(f"priority class {name!r} does not exist", code="unknown_priority_class")
        return pc
    pc = PriorityClass.objects.filter(name="default").first()
    if pc is None:
        pc, _ = PriorityClass.objects.get_or_create(name="default", defaults={"value": 0})
    return pc


def _model_matches(model_name: str, mig_profile: str, pattern: str) -> bool:
    """The policy's own matching rule (a MIG slice only for a request naming MIG or its profile)."""
    kind = matching.Kind(model_name, mig_profile)
    return matching.model_matches(kind, matching.model_alternatives(pattern))


def _check_satisfiable(pool: Pool, *, gpus: int, model: str, min_memory_mb: int, same_host: bool,
                       quota: Quota | None, team: Team) -> None:
    """Refuse at once what no capacity of the pool could ever satisfy (or the team's limit)."""
    if quota is not None and quota.limit is not None and gpus > quota.limit:
        raise DomainError(f"team {team.name} may hold at most {quota.limit} GPUs in pool "
                          f"{pool.name}; asked for {gpus}", code="over_limit")
    matching_kinds = [(most, total) for m, mig, memory, most, total in pool_capacity_profile(pool.pk)
                      if _model_matches(m, mig, model) and (not min_memory_mb or memory >= min_memory_mb)]
    best = max((most if same_host else total for most, total in matching_kinds), default=0)
    if best < gpus:
        where = "on one host" if same_host else "in total"
        what = f" of model {model}" if model else ""
        mem = f" with ≥ {min_memory_mb} MB" if min_memory_mb else ""
        raise DomainError(f"pool {pool.name} has at most {best} GPUs{what}{mem} {where}; "
                          f"{gpus} can never be granted", code="unsatisfiable")


def _fingerprint(data: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def lease_create(*, user: AbstractBaseUser, pool: Pool, gpus: int, team: str | None = None,
                 priority_class: str | None = None, model: str = "", min_memory_mb: int = 0,
                 min_driver_version: str = "", min_cuda_version: str = "",
                 ttl_seconds: int | None = None, same_host: bool = True,
                 requeue_on_loss: bool = False, binding: dict[str, Any] | None = None,
                 idempotency_key: str = "") -> tuple[Lease, bool]:
    """Create a pending lease; returns (lease, created). A repeated Idempotency-Key with the same
    body returns the first lease (created=False); with a different body it is a Conflict."""
    request = {"pool": pool.name, "gpus": gpus, "team": team, "priority_class": priority_class,
               "model": model, "min_memory_mb": min_memory_mb, "ttl_seconds": ttl_seconds,
               "same_host": same_host, "binding": binding, "requeue_on_loss": requeue_on_loss,
               "min_driver_version": min_driver_version, "min_cuda_version": min_cuda_version}
    fingerprint = _fingerprint(request)
    if idempotency_key:
        existing = Lease.objects.filter(user=user, idempotency_key=idempotency_key).first()
        if existing is not None:
            if existing.request_fingerprint != fingerprint:
                raise Conflict("this Idempotency-Key was used with a different request body",
                               code="idempotency_key_reused")
            return existing, False
    team_obj = _resolve_team(user, team)
    pc = _resolve_priority(priority_class)
    quota = Quota.objects.filter(team=team_obj, pool=pool).first()
    _check_satisfiable(pool, gpus=gpus, model=model, min_memory_mb=min_memory_mb,
                       same_host=same_host, quota=quota, team=team_obj)
    ttl = ttl_seconds or settings.GPUPOOL["DEFAULT_TTL_S"]
    lease = Lease(team=team_obj, user=user, pool=pool, priority_class=pc, gpu_count=gpus,
                  model=model, min_memory_mb=min_memory_mb, min_driver_version=min_driver_version,
                  min_cuda_version=min_cuda_version, same_host=same_host,
                  requeue_on_loss=requeue_on_loss, ttl_seconds=ttl,
                  binding_kind=(binding or {}).get("kind", BindingKind.NONE),
                  binding_spec=binding or {}, idempotency_key=idempotency_key,
                  request_fingerprint=fingerprint, reason="waiting for the next scheduling pass")
    try:
        with transaction.atomic():
            lease.save()
            from allocation.leases import audit

            audit(actor=actor_name(user), action="lease.created", obj=lease, lease=lease,
                  message=f"{gpus} GPU(s) in pool {pool.name} for team {team_obj.name}",
                  data={"request": request}).save()
            announce_lease(lease)
    except IntegrityError:
        # Two requests raced with one Idempotency-Key: the other one won; answer with it.
        existing = Lease.objects.filter(user=user, idempotency_key=idempotency_key).first()
        if existing is None or existing.request_fingerprint != fingerprint:
            raise Conflict("this Idempotency-Key was used with a different request body",
                           code="idempotency_key_reused") from None
        return existing, False
    transaction.on_commit(lambda: request_pass(pool.pk))
    return lease, True


def _locked(lease: Lease) -> Lease:
    return Lease.objects.select_for_update(of=("self",)).select_related("priority_class").get(pk=lease.pk)


def lease_release(*, lease: Lease, actor: str, reason: str = "") -> Lease:
    """End a lease by its owner. Idempotent: releasing an ended lease returns it unchanged."""
    with transaction.atomic():
        lease = _locked(lease)
        if lease.state in END_STATES:
            return lease
        if lease.state == S.PENDING:
            lease_end(lease, S.RELEASED, actor=actor, reason=reason or f"cancelled by {actor}")
        else:
            lease_end(lease, S.RELEASED, actor=actor, reason=reason or f"released by {actor}")
    if lease.ending_since is not None:
        from allocation.triggers import request_unbind

        transaction.on_commit(lambda: request_unbind(lease.pk))
    transaction.on_commit(lambda: request_pass(lease.pool_id))
    return lease


def lease_renew(*, lease: Lease, actor: str, ttl_seconds: int | None = None) -> Lease:
    """Push `expires_at` to now + TTL (the heartbeat of a granted or bound lease)."""
    with transaction.atomic():
        lease = _locked(lease)
        if lease.state not in HOLDING_STATES and lease.state != S.PENDING:
            raise Conflict(f"a {lease.state} lease cannot be renewed", code="not_renewable")
        ttl = min(ttl_seconds or lease.ttl_seconds, settings.GPUPOOL["MAX_TTL_S"])
        if ttl_seconds:
            lease.ttl_seconds = ttl
        if lease.state in HOLDING_STATES:
            lease.expires_at = timezone.now() + timedelta(seconds=ttl)
        lease.save(update_fields=["ttl_seconds", "expires_at"])
        from allocation.leases import audit

        audit(actor=actor, action="lease.renewed", obj=lease, lease=lease,
              message=f"expires at {lease.expires_at:%Y-%m-%d %H:%M:%S} UTC" if lease.expires_at
              else "TTL updated").save()
    return lease


def leases_reap(*, now: datetime | None = None) -> dict[str, int]:
    """Periodic housekeeping: expire leases past their TTL, lose leases on hosts offline past the
    grace, free GPUs of unbound leases whose preemption notice ran out."""
    now = now or timezone.now()
    counts = {"expired": 0, "lost": 0, "freed": 0, "requeued": 0}
    pools: set[int] = set()
    expired = Lease.objects.filter(state__in=HOLDING_STATES, expires_at__lte=now).values_list("pk", flat=True)
    for pk in list(expired[:1000]):
        with transaction.atomic():
            lease = Lease.objects.select_for_update().get(pk=pk)
            if lease.state in HOLDING_STATES and lease.expires_at and lease.expires_at <= now:
                lease_end(lease, S.EXPIRED, actor="system:reaper", now=now,
                          reason=f"TTL ran out at {lease.expires_at:%H:%M:%S} UTC without renewal")
                counts["expired"] += 1
                pools.add(lease.pool_id)
                if lease.ending_since:
                    from allocation.triggers import request_unbind

                    transaction.on_commit(lambda pk=lease.pk: request_unbind(pk))
    grace = timedelta(seconds=settings.GPUPOOL["LOST_GRACE_S"])
    lost = Lease.objects.filter(state__in=HOLDING_STATES, host__state=HostState.OFFLINE,
                                host__offline_since__lte=now - grace).values_list("pk", flat=True)
    counts["lost"], counts["requeued"] = leases_mark_lost(list(lost[:1000]), reason_prefix="host offline",
                                                          now=now, pools=pools)
    # Unbound leases preempted with notice: their GPUs come back once the grace has passed.
    ending = (Lease.objects.filter(state__in=END_STATES, ending_since__isnull=False,
                                   gpu_links__active=True)
              .exclude(binding_status__has_key="handle")
              .select_related("priority_class").distinct())
    due = [lease for lease in ending
           if lease.ending_since + timedelta(seconds=lease.priority_class.grace_s) <= now]
    if due:
        counts["freed"] = lease_free_gpus([lease.pk for lease in due])
        pools.update(lease.pool_id for lease in due)
    for pool_id in pools:
        request_pass(pool_id)
    return counts


def leases_mark_lost(lease_ids: list[Any], *, reason_prefix: str, now: datetime | None = None,
                     pools: set[int] | None = None) -> tuple[int, int]:
    """Leases whose host or GPUs are gone become `lost`; with requeue_on_loss they go back to
    pending to be placed elsewhere (the high-availability path). Returns (lost, requeued)."""
    now = now or timezone.now()
    lost = requeued = 0
    for pk in lease_ids:
        with transaction.atomic():
            lease = Lease.objects.select_for_update(of=("self",)).select_related("host").get(pk=pk)
            if lease.state not in HOLDING_STATES:
                continue
            host = lease.host.name if lease.host else "its host"
            lease_end(lease, S.LOST, actor="system:inventory", now=now, keep_gpus=False,
                      reason=f"{reason_prefix}: {host}")
            lease_free_gpus([lease.pk])
            lost += 1
            if pools is not None:
                pools.add(lease.pool_id)
            if lease.requeue_on_loss:
                transition(lease, S.PENDING, actor="system:inventory", now=now,
                           reason=f"requeued after loss of {host}").save()
                lease.binding_status = {}
                lease.save()
                requeued += 1
    return lost, requeued


def team_usage(team: Team, pool: Pool) -> dict[str, int]:
    """GPUs a team holds in a pool, and how many of them are borrowed."""
    agg = Lease.objects.filter(team=team, pool=pool, gpu_links__active=True).aggregate(
        used=Count("gpu_links", filter=Q(gpu_links__active=True)),
        borrowed=Count("gpu_links", filter=Q(gpu_links__active=True, borrowed=True)),
        last=Max("granted_at"))
    return {"used": agg["used"] or 0, "borrowed": agg["borrowed"] or 0}
