"""Shared reads of allocation: what a user may see, quota usage, fair-share standing, pending leases
per pool and GPUs held per team. The package also holds `capacity_preview` and `invariants`."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, cast

from django.db.models import Count, OuterRef, Prefetch, QuerySet, Subquery, Sum
from django.db.models.functions import Now
from django.utils import timezone

from allocation.choices import LeaseState
from allocation.ledger import team_usage_views
from allocation.models import AuditEvent, Lease, LeaseGpu, PriorityClass, Quota, Team
from core.db.statements import compiled_values
from core.roles import is_pool_admin

LEASE_FIELDS = tuple(f.attname for f in Lease._meta.concrete_fields)


def _of_member(leases: QuerySet[Lease], user_id: Any) -> QuerySet[Lease]:
    # A semi-join on the user's memberships: one index probe, no join through the team.
    return leases.filter(team_id__in=Team.members.through.objects.filter(user_id=user_id).values("team_id"))


def lease_list(*, user: Any, related: bool = True) -> QuerySet[Lease]:
    """Leases visible to `user`: their teams' leases, or all for a pool admin, newest first. With
    `related`, what a page of them shows (team, user, pool, priority class, host, GPUs) is loaded
    with them; without, the bare rows (for values() or a lock)."""
    qs = Lease.objects.all()
    if related:
        qs = qs.select_related("team", "user", "pool", "priority_class", "host").prefetch_related(
            Prefetch("gpu_links", queryset=LeaseGpu.objects.select_related("gpu")))
    if not is_pool_admin(user):
        qs = _of_member(qs, user.pk)
    return qs.order_by("-created_at")


def _lease_row_query(lease_id: Any, scope: int | None, lock: bool) -> QuerySet[Any]:
    leases = Lease.objects.filter(pk=lease_id)
    if scope is not None:
        leases = _of_member(leases, scope)
    if lock:
        leases = leases.select_for_update()
    rows = with_gpus(with_names(leases.values(*LEASE_FIELDS)))
    # A locked read is the start of a write: the database's clock comes with it (`db_now`), so
    # the write decides by the one clock every process shares at no extra query (core.db.db_now).
    return rows.annotate(db_now=Now()) if lock else rows


def as_lease_id(value: Any) -> uuid.UUID | None:
    """A lease id from a URL or a client (a UUID in any spelling); None when it is not one."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def lease_row(lease_id: Any, *, visible_to: Any = None, lock: bool = False) -> dict[str, Any] | None:
    """One lease as a values() row: every column (LEASE_FIELDS), the names of what it refers to
    (with_names) and its GPU links (with_gpus). None when it does not exist, when
    `lease_id` is no UUID or, with `visible_to`, when that user may not see it. With `lock`, its
    row is locked FOR UPDATE (inside the caller's transaction). One query, compiled once per
    process: it is the read of every lease request (see core.db.statements.compiled_values)."""
    pk = as_lease_id(lease_id)
    if pk is None:
        return None
    scope = None if visible_to is None or is_pool_admin(visible_to) else visible_to.pk
    rows = compiled_values("lease_row", _lease_row_query, lease_id=pk, scope=scope, lock=lock)
    return rows[0] if rows else None


def with_names(queryset: QuerySet[Any]) -> QuerySet[Any]:
    """Annotate each lease with the names of what it refers to: `team_name`, `user_name`,
    `pool_name`, `priority_class_name`, `host_name` (None while it has no host). Correlated
    subqueries rather than joins: PostgreSQL plans a five-way join in ~0.8 ms and these in ~0.1 ms,
    on a read that itself takes ~0.05 ms."""
    from django.contrib.auth import get_user_model

    from inventory.models import Host, Pool

    def name(model: Any, fk: str, attr: str = "name") -> Subquery:
        # order_by(): a model's default ordering would sort (Host's even joins its source) a
        # lookup by primary key.
        return Subquery(model.objects.filter(pk=OuterRef(fk)).order_by().values(attr))

    named = queryset.annotate(team_name=name(Team, "team_id"),
                              user_name=name(get_user_model(), "user_id", "username"),
                              pool_name=name(Pool, "pool_id"),
                              priority_class_name=name(PriorityClass, "priority_class_id"),
                              host_name=name(Host, "host_id"))
    return cast("QuerySet[Any]", named)


def with_gpus(queryset: QuerySet[Any]) -> QuerySet[Any]:
    """Annotate each lease with its GPU links, `gpu_link_pairs`: a [uuid, "true"|"false"] pair a link
    (whether it is active), in the order the API lists them (`gpu_links_split` reads it), so rows
    render without a query of their own. One subquery, not one per column: each joins the links
    to the GPUs, which on a fleet of hundreds of GPUs PostgreSQL hashes whole (~45 pages a
    lease read)."""
    from django.contrib.postgres.expressions import ArraySubquery
    from django.contrib.postgres.fields import ArrayField
    from django.db.models import CharField, F, Func
    from django.db.models.functions import Cast

    links = LeaseGpu.objects.filter(lease_id=OuterRef("pk")).order_by("gpu__host_id", "gpu__index", "pk")
    pair = Func(F("gpu__uuid"), Cast("active", CharField()), template="ARRAY[%(expressions)s]",
                output_field=ArrayField(CharField()))
    return cast("QuerySet[Any]", queryset.annotate(gpu_link_pairs=ArraySubquery(links.values(pair=pair))))


def gpu_links_split(pairs: Iterable[Sequence[str]]) -> tuple[list[str], list[bool]]:
    """The GPU UUIDs and whether each link is active, from a `with_gpus` annotation."""
    pairs = list(pairs)
    return [uuid for uuid, _ in pairs], [active == "true" for _, active in pairs]


def team_list(*, user: Any) -> QuerySet[Team]:
    from django.contrib.auth import get_user_model

    qs = Team.objects.select_related("parent").prefetch_related(
        Prefetch("members", queryset=get_user_model().objects.order_by("username")))
    return qs if is_pool_admin(user) else qs.filter(members=user)


def quota_list(*, user: Any, team_ids: Iterable[int] | None = None) -> list[Quota]:
    """Quotas visible to `user` (of `team_ids` only, when given: one team's page counts only its
    own GPUs), each with `used`, `borrowed` and `pending` GPU counts set (three queries in all)."""
    qs = Quota.objects.select_related("team", "pool").order_by("team__name", "pool__name")
    pending_leases = Lease.objects.filter(state=LeaseState.PENDING)
    if team_ids is not None:
        team_ids = list(team_ids)
        qs, pending_leases = qs.filter(team_id__in=team_ids), pending_leases.filter(team_id__in=team_ids)
    if not is_pool_admin(user):
        qs = qs.filter(team__members=user)
    quotas = list(qs)
    used = team_gpus_held(team_ids)
    pending = {(r["team_id"], r["pool_id"]): r["n"] for r in pending_leases.values("team_id", "pool_id")
               .annotate(n=Sum("gpu_count"))}
    for quota in quotas:
        quota.used, quota.borrowed = used.get((quota.team_id, quota.pool_id), Held(0, 0))
        quota.pending = pending.get((quota.team_id, quota.pool_id), 0)
    return quotas


def fair_share_standing() -> dict[str, dict[str, float]]:
    """Per team: decayed usage (GPU-hours), weight, usage ÷ weight and rank (1 = most deserving)."""
    views = team_usage_views(timezone.now())
    rows = sorted(views.values(), key=lambda t: t.decayed_usage / t.weight)
    return {t.name: {"decayed_gpu_hours": t.decayed_usage / 3600, "weight": t.weight,
                     "fair_share": t.decayed_usage / 3600 / t.weight, "rank": i + 1}
            for i, t in enumerate(rows)}


def audit_event_list(*, user: Any) -> QuerySet[AuditEvent]:
    """Audit events visible to `user`: all for a pool admin; for a member, the events of their
    teams' leases (admin actions on hosts and quotas are for admins only)."""
    qs = AuditEvent.objects.all()
    if not is_pool_admin(user):
        qs = qs.filter(lease__team__members=user)
    return qs.order_by("-at", "-id")


class Pending(NamedTuple):
    """A pool's queue: how many leases wait and how many GPUs they ask for."""

    leases: int
    gpus: int


def pending_by_pool(pool_ids: Iterable[int] | None = None) -> dict[int, Pending]:
    """Per pool (id): its pending leases and the GPUs they ask for, in one grouped query; pools
    with nothing pending are absent. The one reading of "the queue of a pool" (dashboard, history,
    API, /metrics)."""
    leases = Lease.objects.filter(state=LeaseState.PENDING)
    if pool_ids is not None:
        leases = leases.filter(pool_id__in=list(pool_ids))
    return {pool_id: Pending(n, gpus or 0) for pool_id, n, gpus in (
        leases.values_list("pool_id").annotate(n=Count("pk"), g=Sum("gpu_count")).order_by())}


def pending_by_code() -> dict[tuple[int, str], int]:
    """(pool id, pending code) -> pending leases, in one grouped query; pairs with none are
    absent. Summed over the codes, a pool's count is `pending_by_pool`'s."""
    return {(pool_id, code): n for pool_id, code, n in (
        Lease.objects.filter(state=LeaseState.PENDING).values_list("pool_id", "pending_code")
        .annotate(n=Count("pk")).order_by())}


class Held(NamedTuple):
    """GPUs a team holds in a pool now, and how many of them it borrows beyond its guarantee."""

    gpus: int
    borrowed: int


def team_gpus_held(team_ids: Iterable[int] | None = None) -> dict[tuple[int, int], Held]:
    """Per (team id, pool id): the GPUs the team holds there now (active GPU links) and the part
    held by borrowing leases, in one grouped query; pairs holding nothing are absent. The one
    reading of "what a team holds" (quotas, teams API, dashboard, history, /metrics)."""
    links = LeaseGpu.objects.filter(active=True)
    if team_ids is not None:
        links = links.filter(lease__team_id__in=list(team_ids))
    held: dict[tuple[int, int], Held] = {}
    for team_id, pool_id, borrowed, n in (links.values_list("lease__team_id", "lease__pool_id", "lease__borrowed")
                                          .annotate(n=Count("pk")).order_by()):
        gpus, lent = held.get((team_id, pool_id), Held(0, 0))
        held[(team_id, pool_id)] = Held(gpus + n, lent + (n if borrowed else 0))
    return held
