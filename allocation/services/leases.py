"""Writes on leases from users: create, release, renew (the reaper, which ends the rest, is services/reaper.py)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, F, OuterRef, Q, QuerySet, Subquery

from allocation.audit import audit
from allocation.choices import END_STATES, BindingKind, LeaseState
from allocation.lease_states import lease_end
from allocation.models import AuditEvent, Budget, Lease, PoolScheduling, PriorityClass, Quota, Team
from allocation.outbox import change_of, outbox_cte, publish_after_commit
from allocation.policy.admission import DEFAULT_QUEUE_CAPS, QueueCaps
from allocation.policy.codes import PendingCode
from allocation.selectors import LEASE_FIELDS, lease_row, with_gpus, with_names
from allocation.services.budgets import Demotion, budget_judge
from allocation.services.placement import check_placeable, check_satisfiable
from allocation.services.queue_caps import QueueGuard, queue_guard, refused
from allocation.triggers import request_pass, request_unbind
from core.db import retry_on_deadlock
from core.db.statements import compiled_values, execute_as_one, insert_sql
from core.errors import Conflict, DomainError, Forbidden, NotFound
from core.roles import is_pool_admin
from inventory.models import Pool


def actor_name(user: Any) -> str:
    return getattr(user, "username", "") or "anonymous"


@dataclass(frozen=True)
class _Resolved:
    """What a lease request names, resolved: enough to write and render the lease."""

    pool: Pool
    team: Team
    priority_class: PriorityClass
    quota_limit: int | None  # the team's limit in the pool; None: no quota row or no limit
    has_budget: bool = False  # the team has some GPU-hour budget (then they judge the request)
    queue_caps: QueueCaps = DEFAULT_QUEUE_CAPS  # the pool's caps on each team's queue


def _no_pool(name: str) -> DomainError:
    # The message DRF's SlugRelatedField gave when the serializer looked the pool up.
    return DomainError(f"pool: Object with name={name} does not exist.", code="invalid",
                       details={"pool": [f"Object with name={name} does not exist."]})


def _resolve_query(user_id: int, pool_name: str, team_name: str | None, pc_name: str) -> QuerySet[Any]:
    members = Team.members.through.objects
    teams = (Team.objects.filter(name=team_name) if team_name is not None
             else Team.objects.filter(pk__in=members.filter(user_id=user_id).values("team_id")))
    # order_by() in the subqueries: the models' default orderings would sort (Quota's even join)
    # what are lookups of one row by a unique key.
    quota = Quota.objects.filter(team_id=OuterRef("pk"), pool__name=pool_name).order_by()
    scheduling = PoolScheduling.objects.filter(pool__name=pool_name).order_by()
    return teams.annotate(
        is_member=Exists(members.filter(team_id=OuterRef("pk"), user_id=user_id)),
        pool_pk=Subquery(Pool.objects.filter(name=pool_name).order_by().values("pk")[:1]),
        pc_pk=Subquery(PriorityClass.objects.filter(name=pc_name).order_by().values("pk")[:1]),
        quota_limit=Subquery(quota.values("limit")[:1]),
        # Its own budgets or its departments' (up to four levels up: `ancestor_ids`).
        has_budget=Exists(Budget.objects.filter(
            Q(team_id=OuterRef("pk")) | Q(team_id=OuterRef("parent_id")) | Q(team_id=OuterRef("parent__parent_id"))
            | Q(team_id=OuterRef("parent__parent__parent_id"))
            | Q(team_id=OuterRef("parent__parent__parent__parent_id"))).order_by()),
        # No scheduling row: the default caps; a row's null: no cap.
        has_caps=Exists(scheduling),
        leases_cap=Subquery(scheduling.values("pending_leases_per_team")[:1]),
        gpus_cap=Subquery(scheduling.values("pending_gpus_per_team")[:1]),
        # A department (a team with child teams) holds no leases: its teams do.
        has_children=Exists(Team.objects.filter(parent_id=OuterRef("pk")).order_by()),
        parent_pk=F("parent_id"),  # under a department: its budgets judge too (budget_judge)
    ).order_by("name").values("pk", "name", "is_member", "pool_pk", "pc_pk", "quota_limit", "has_budget",
                              "has_caps", "leases_cap", "gpus_cap", "has_children",
                              "parent_pk")[:2]


def _resolve(user: Any, pool: Pool | str, team_name: str | None, pc_name: str | None) -> _Resolved:
    """Pool, team (named, or the user's only one), membership, priority class (named, or
    `default`), the team's quota in the pool and the pool's queue caps, in one query (compiled
    once per process).
    Errors may cost more queries."""
    pool_name = pool if isinstance(pool, str) else pool.name
    rows = compiled_values("lease_request", _resolve_query, user_id=user.pk, pool_name=pool_name,
                           team_name=team_name or None, pc_name=pc_name or "default")
    if not rows or rows[0]["pool_pk"] is None:
        if not Pool.objects.filter(name=pool_name).exists():
            raise _no_pool(pool_name)
        if team_name:
            raise NotFound(f"team {team_name!r} does not exist", code="unknown_team")
        raise DomainError("you are in no team; ask an admin to add you, or name a team", code="no_team")
    if len(rows) > 1:
        raise DomainError("you are in several teams: say which one with 'team'", code="team_required")
    row = rows[0]
    if team_name and not row["is_member"] and not is_pool_admin(user):
        raise Forbidden(f"you are not a member of team {team_name!r}", code="not_a_member")
    if row["has_children"]:
        raise DomainError(f"team {row['name']!r} is a department: leases belong to its teams "
                          "(name one of them)", code="not_a_leaf_team")
    if row["pc_pk"] is not None:
        pc = PriorityClass(pk=row["pc_pk"], name=pc_name or "default")
    elif pc_name:
        raise NotFound(f"priority class {pc_name!r} does not exist", code="unknown_priority_class")
    else:
        pc, _ = PriorityClass.objects.get_or_create(name="default", defaults={"value": 0})
    pool_obj = Pool(pk=row["pool_pk"], name=pool_name) if isinstance(pool, str) else pool
    caps = QueueCaps(row["leases_cap"], row["gpus_cap"]) if row["has_caps"] else DEFAULT_QUEUE_CAPS
    team = Team(pk=row["pk"], name=row["name"], parent_id=row["parent_pk"])
    return _Resolved(pool=pool_obj, team=team, priority_class=pc,
                     quota_limit=row["quota_limit"], has_budget=bool(row["has_budget"]), queue_caps=caps)


def _fingerprint(data: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def lease_create(*, user: Any, pool: Pool | str, gpus: int, team: str | None = None,
                 priority_class: str | None = None, model: str = "", min_memory_mb: int = 0,
                 min_driver_version: str = "", min_cuda_version: str = "",
                 ttl_seconds: int | None = None, same_host: bool = True,
                 requeue_on_loss: bool = False, binding: dict[str, Any] | None = None,
                 selector: dict[str, Any] | None = None, idempotency_key: str = "",
                 topology: dict[str, Any] | None = None) -> tuple[Lease, bool]:
    """Create a pending lease; returns (lease, created). `pool` is a Pool or its name (an
    unknown name is an `invalid` error on the field `pool`). A repeated Idempotency-Key with the
    same body returns the first lease (created=False); with a different body it is a Conflict.

    The new lease comes back with its team, user, pool and priority class set (names only), so
    it renders without a query. The whole request costs two queries: one resolves
    what it names, one writes the lease and its audit event (the unique constraint on
    (user, Idempotency-Key) decides a replay, not a prior read); a third for a team with a
    GPU-hour budget, which may refuse the lease (Forbidden `budget_exhausted`) or give it the
    lowest priority class, saying why in its reason (allocation.services.budgets.budget_judge).
    The write admits the lease only while its team's queue in the pool is under the pool's
    caps, atomically (allocation.services.queue_caps): over one it is QueueFull (429
    `queue_full`)."""
    pool_name = pool if isinstance(pool, str) else pool.name
    request = lease_request(pool=pool_name, gpus=gpus, team=team, priority_class=priority_class, model=model,
                            min_memory_mb=min_memory_mb, min_driver_version=min_driver_version,
                            min_cuda_version=min_cuda_version, ttl_seconds=ttl_seconds, same_host=same_host,
                            requeue_on_loss=requeue_on_loss, binding=binding, selector=selector, topology=topology)
    fingerprint = _fingerprint(request)
    try:
        resolved, demoted = judge(user, pool, request)
    except DomainError:
        # A replay answers with the first lease even if the request would be refused today.
        if idempotency_key:
            replay = _replay(user, idempotency_key, fingerprint)
            if replay is not None:
                return replay, False
        raise
    lease, event, resolved = new_lease(user, resolved, demoted, request, fingerprint, idempotency_key)
    guard = queue_guard(pool_id=resolved.pool.pk, team_id=resolved.team.pk, gpus=gpus, caps=resolved.queue_caps)
    inserted, queue = _insert_lease(lease, event, guard)
    if not inserted:
        # Kept out by another request with this Idempotency-Key that was first (now or earlier:
        # answer with its lease, even where the queue is full now), else by the queue's caps.
        replay = _replay(user, idempotency_key, fingerprint) if idempotency_key else None
        if replay is not None:
            return replay, False
        full = queue and refused(caps=resolved.queue_caps, team=resolved.team.name, pool=pool_name, gpus=gpus,
                                 pending_leases=queue[0], pending_gpus=queue[1])
        if full:
            raise full
        # (Without a key the only unique constraint left is the random primary key.)
        assert idempotency_key, "a lease insert conflicted without an Idempotency-Key"
        raise Conflict("this Idempotency-Key was used with a different request body",  # deleted in between
                       code="idempotency_key_reused")
    publish_after_commit()
    transaction.on_commit(lambda: request_pass(resolved.pool.pk))
    return lease, True


def lease_request(*, pool: str, gpus: int, team: str | None, priority_class: str | None, model: str,
                  min_memory_mb: int, min_driver_version: str, min_cuda_version: str, ttl_seconds: int | None,
                  same_host: bool, requeue_on_loss: bool, binding: dict[str, Any] | None,
                  selector: dict[str, Any] | None, topology: dict[str, Any] | None = None) -> dict[str, Any]:
    """A lease request as its Idempotency-Key fingerprint and its audit event record it."""
    request = {"pool": pool, "gpus": gpus, "team": team, "priority_class": priority_class,
               "model": model, "min_memory_mb": min_memory_mb, "ttl_seconds": ttl_seconds,
               "same_host": same_host, "binding": binding, "requeue_on_loss": requeue_on_loss,
               "min_driver_version": min_driver_version, "min_cuda_version": min_cuda_version}
    if selector:  # only when given, so that the fingerprints of earlier keys still match
        request["selector"] = selector
    if topology:
        request["topology"] = topology
    return request


def judge(user: Any, pool: Pool | str, request: dict[str, Any]) -> tuple[_Resolved, Demotion | None]:
    """What `request` (lease_request) names, resolved, and whether it could ever be satisfied and
    placed, and what the team's budgets say (a refusal raises DomainError). The batch create
    (services/lease_batch.py) judges each distinct request once."""
    resolved = _resolve(user, pool, request["team"], request["priority_class"])
    gpus, model, memory, same_host = request["gpus"], request["model"], request["min_memory_mb"], request["same_host"]
    check_satisfiable(resolved.pool, gpus=gpus, model=model, min_memory_mb=memory,
                      same_host=same_host, limit=resolved.quota_limit, team=resolved.team)
    check_placeable(resolved.pool, gpus=gpus, model=model, min_memory_mb=memory, same_host=same_host,
                    workload=(request["binding"] or {}).get("kind", ""), selector=request.get("selector"))
    demoted = budget_judge(resolved.team, resolved.pool) if resolved.has_budget else None
    return resolved, demoted


def new_lease(user: Any, resolved: _Resolved, demoted: Demotion | None, request: dict[str, Any],
              fingerprint: str, idempotency_key: str) -> tuple[Lease, AuditEvent, _Resolved]:
    """The pending lease of a judged request and its `lease.created` audit event, unsaved; and
    `resolved` with the priority class a budget demoted it to."""
    gpus, binding, selector = request["gpus"], request["binding"], request.get("selector")
    ttl = request["ttl_seconds"] or settings.GPUPOOL["DEFAULT_TTL_S"]
    reason, note = "waiting for the next scheduling pass", {}
    if demoted is not None and demoted.priority_class.pk != resolved.priority_class.pk:
        resolved = replace(resolved, priority_class=demoted.priority_class)
        reason += f"; {demoted.reason}"
        note = {"demoted": {"to": demoted.priority_class.name, "from": request["priority_class"] or "default",
                            "reason": demoted.reason}}
    lease = Lease(team=resolved.team, user=user, pool=resolved.pool, priority_class=resolved.priority_class,
                  gpu_count=gpus, model=request["model"], min_memory_mb=request["min_memory_mb"],
                  min_driver_version=request["min_driver_version"], min_cuda_version=request["min_cuda_version"],
                  same_host=request["same_host"], selector=selector or {}, topology=request.get("topology") or {},
                  requeue_on_loss=request["requeue_on_loss"], ttl_seconds=ttl,
                  binding_kind=(binding or {}).get("kind", BindingKind.NONE),
                  binding_spec=binding or {}, idempotency_key=idempotency_key,
                  request_fingerprint=fingerprint, reason=reason, pending_code=PendingCode.NEXT_PASS)
    event = audit(actor=actor_name(user), action="lease.created", obj=lease, lease=lease,
                  message=f"{gpus} GPU(s) in pool {request['pool']} for team {resolved.team.name}"
                          + (f"; {note['demoted']['reason']}" if note else ""),
                  data={"request": request, **note})
    return lease, event, resolved


def _insert_lease(lease: Lease, event: Any, guard: QueueGuard | None) -> tuple[bool, tuple[int, int] | None]:
    """Write the lease, its audit event and its outbox event, atomically; returns whether it was
    written and, with a `guard`, the team's queue in the pool before it (pending leases, GPUs).
    Nothing is written when the (user, Idempotency-Key) pair already has a lease, or when the
    guard finds the queue at a cap. One statement: the events are inserted once per row the lease
    insert returns, so none on a conflict; the guard's lock goes ahead of it in the same round
    trip."""
    ctes = [("new_lease", insert_sql(lease, ignore_conflicts=True, returning="id")),
            ("event", insert_sql(event, source="new_lease")),
            outbox_cte(change_of(lease), source="new_lease")]
    if guard is None:
        return bool(execute_as_one(ctes, ("SELECT id FROM new_lease", []))), None
    ctes[0] = ("new_lease", insert_sql(lease, ignore_conflicts=True, returning="id", source=guard.room))
    rows = execute_as_one([*guard.ctes, *ctes], ("SELECT (SELECT id FROM new_lease), leases, gpus FROM queue", []),
                          before=guard.lock)
    lease_id, leases, gpus = rows[0]
    return lease_id is not None, (int(leases), int(gpus))


def _replay(user: Any, key: str, fingerprint: str) -> Lease | None:
    """The lease this user made with Idempotency-Key `key`, if any; Conflict when it was made
    from another request body."""
    existing = with_gpus(with_names(Lease.objects.filter(user=user, idempotency_key=key))).first()
    if existing is not None and existing.request_fingerprint != fingerprint:
        raise Conflict("this Idempotency-Key was used with a different request body",
                       code="idempotency_key_reused")
    return existing


def _locked(lease: Lease | Any, visible_to: Any = None) -> tuple[Lease, datetime]:
    """The lease (an instance or its id), its row locked, with what renders it (selectors.lease_row:
    names and GPUs), and the database's clock, in one query. With `visible_to`,
    only a lease that user may see: another team's is NotFound, like a missing one. The clock is
    the time the caller's write decides by: never this process's, which may be minutes off the
    worker's that reaps (core.db.db_now)."""
    row = lease_row(lease.pk if isinstance(lease, Lease) else lease, visible_to=visible_to, lock=True)
    if row is None:
        raise NotFound("Not found.", code="not_found")
    locked = Lease.from_db(connection.alias, LEASE_FIELDS, [row[name] for name in LEASE_FIELDS])
    for name in row.keys() - {*LEASE_FIELDS, "db_now"}:  # the names and GPU links, for rendering
        setattr(locked, name, row[name])
    return locked, row["db_now"]


@retry_on_deadlock()
def lease_release(*, lease: Lease | Any, actor: str, reason: str = "", visible_to: Any = None) -> Lease:
    """End a lease by its owner. Idempotent: releasing an ended lease returns it unchanged.
    `lease` is an instance or an id; with `visible_to`, a lease that user may not see is
    NotFound. The lease comes back as ended, ready to render (see `_locked`). It costs
    BEGIN, one locked read, one write (lease_end), COMMIT. Locks the lease, then writes its GPUs
    (the order a drain keeps too); run again from the locked read if it is a deadlock victim."""
    with transaction.atomic():
        lease, now = _locked(lease, visible_to)
        if lease.state in END_STATES:
            return lease
        if lease.state == LeaseState.PENDING:
            lease_end(lease, LeaseState.RELEASED, actor=actor, reason=reason or f"cancelled by {actor}", now=now)
        else:
            lease_end(lease, LeaseState.RELEASED, actor=actor, reason=reason or f"released by {actor}", now=now)
    if lease.ending_since is not None:
        transaction.on_commit(lambda: request_unbind(lease.pk))
    transaction.on_commit(lambda: request_pass(lease.pool_id))
    return lease


def lease_renew(*, lease: Lease | Any, actor: str, ttl_seconds: int | None = None,
                visible_to: Any = None, keep: bool = False, user: Any = None) -> Lease:
    """Push `expires_at` to now + TTL (the heartbeat of a granted or bound lease). `lease` and
    `visible_to` as for lease_release; the lease comes back ready to render.

    `keep=True` also exempts the lease from idle reclaim for good (`idle_exempt`, clearing a
    standing idle warning): an admin's approval, so only a pool admin `user` may ask it; anyone
    else is Forbidden (`keep_requires_admin`) and nothing changes."""
    if keep and not is_pool_admin(user):
        raise Forbidden("only a pool admin may exempt a lease from idle reclaim (keep=true)",
                        code="keep_requires_admin")
    with transaction.atomic():
        lease, now = _locked(lease, visible_to)
        if not lease.is_renewable:
            raise Conflict(f"a {lease.state} lease cannot be renewed", code="not_renewable")
        ttl = min(ttl_seconds or lease.ttl_seconds, settings.GPUPOOL["MAX_TTL_S"])
        if ttl_seconds:
            lease.ttl_seconds = ttl
        if lease.is_holding:
            lease.expires_at = now + timedelta(seconds=ttl)
        fields = ["ttl_seconds", "expires_at"]
        if keep:
            fields += _exempt_from_idle_reclaim(lease, actor)
        lease.save(update_fields=fields)
        audit(actor=actor, action="lease.renewed", obj=lease, lease=lease,
              message=f"expires at {lease.expires_at:%Y-%m-%d %H:%M:%S} UTC" if lease.expires_at
              else "TTL updated").save()
    return lease


def _exempt_from_idle_reclaim(lease: Lease, actor: str) -> list[str]:
    """Set `idle_exempt` (in memory, audited); returns the fields to save. Nothing if it is already."""
    if lease.idle_exempt:
        return []
    lease.idle_exempt = True
    fields = ["idle_exempt"]
    if lease.warned_at is not None:
        lease.warning, lease.warned_at = "", None
        lease.reason = f"idle warning cleared: exempted from idle reclaim by {actor}"
        fields += ["warning", "warned_at", "reason"]
    audit(actor=actor, action="lease.idle_exempt", obj=lease, lease=lease,
          message=f"exempted from idle reclaim by {actor} (renewed with keep=true)").save()
    return fields
