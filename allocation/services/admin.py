"""Admin writes: cordon/drain/uncordon hosts, forget the workloads of a host gone for good, edit
quotas and fair-share weights (capacity moves are in `capacity`)."""

from __future__ import annotations

from functools import partial

from django.db import transaction
from django.db.models import Q

from allocation.audit import audit, bulk_audit
from allocation.choices import END_STATES, HOLDING_STATES, LeaseState
from allocation.lease_states import lease_end, lease_free_gpus, stop_pending
from allocation.models import Lease, Quota, Team
from allocation.services.teams_tree import quota_tree_check
from allocation.triggers import request_pass, request_unbind
from allocation.workloads.stopping import pending_stops
from core.db import db_now, retry_on_deadlock
from core.errors import Conflict, DomainError
from inventory.models import Host
from inventory.services import host_cordon, host_drain, host_uncordon


@retry_on_deadlock()
def host_admin_action(*, host: Host, verb: str, actor: str) -> Host:
    """cordon: no new leases; drain: cordon and end its leases with notice; uncordon: undo.

    Locks in the order every lease write takes them: the leases first, then the host and its
    GPUs (lease_release, the reaper and the pass's preemptions lock a lease, then write its GPUs
    and read its host). Run again if PostgreSQL picks it as a deadlock victim all the same."""
    actions = {"cordon": host_cordon, "drain": host_drain, "uncordon": host_uncordon}
    if verb not in actions:
        raise DomainError(f"unknown host action {verb!r}")
    with transaction.atomic():
        # A drain that locked the host first and then waited for a lease that a release held
        # closed a cycle with any lease write that then touched the host or its GPUs; and a GPU
        # that release freed meanwhile was stored as free (from the host row as it was before
        # the uncommitted drain) on a draining host. With the leases locked first, a release
        # either finishes before the host is touched (the GPU refresh below then sees its GPUs
        # free) or finds its lease already preempted.
        leases = _holding_leases_locked(host) if verb == "drain" else []
        host = actions[verb](host=host)
        audit(actor=actor, action=f"host.{verb}", obj=host, message=f"{verb} host {host.name}").save()
        # Lease times on the database's clock, the one their grants were stamped by: this
        # process's may be minutes off (core.db.db_now).
        now = db_now() if leases else None
        # Each end locks its team's fair-share ledger row: in team order, the order every other
        # writer of several takes them in (ledger_close_many), or two drains (or a drain and a
        # pass's preemptions) ending leases of teams a and b lock their rows the other way round.
        why = f"host {host.name} drained by {actor}"
        for lease in sorted(leases, key=lambda lease: lease.team_id):
            lease_end(lease, LeaseState.PREEMPTED, actor=actor, keep_gpus=True, now=now, reason=why)
            if stop_pending(lease):
                transaction.on_commit(partial(request_unbind, lease.pk))
        # A preemption like the pass's and idle reclaim's, so `gpupool_preemptions_total` counts
        # it (cause "drain").
        bulk_audit(audit(actor=actor, action="lease.preempt", obj=lease, lease=lease, at=now, message=why,
                         data={"victim": str(lease.pk), "by": None, "victim_team": lease.team.name,
                               "grace_s": lease.priority_class.grace_s,
                               "cause": "drain", "host": host.name}) for lease in leases)
    return host


@retry_on_deadlock()
def host_forget_workloads(*, host: Host, actor: str, reason: str = "",
                          force: bool = False) -> tuple[list[str], int]:
    """An admin's word that `host` is gone for good (decommissioned, reinstalled, out of the
    configuration): the workloads of its ended leases that could not be stopped are forgotten
    and their GPUs freed, the one way besides a successful stop. Leases still granted or bound
    are not touched (drain the host to end them). Refused (Conflict `host_not_offline`) while
    the host answers discovery, unless `force`: there a stop can still succeed, and forgetting
    would hand out GPUs under a running workload. Audited per lease and for the host; returns
    (the forgotten leases' ids, the GPUs freed)."""
    if not host.is_offline and not force:
        raise Conflict(f"host {host.name} is {host.state}, not offline: stopping its leases' workloads "
                       "can still succeed; forget them only when it is gone for good (force=true)",
                       code="host_not_offline")
    why = reason or "host gone for good"
    with transaction.atomic():
        # Leases first (the order every lease write keeps), only their rows; then their GPUs.
        on_host = pending_stops().filter(Q(host_id=host.pk)
                                         | Q(gpu_links__active=True, gpu_links__gpu__host_id=host.pk))
        leases = list(Lease.objects.select_for_update(of=("self",))
                      .filter(pk__in=on_host.values("pk"), state__in=END_STATES, ending_since__isnull=False)
                      .order_by("pk"))
        now = db_now()
        for lease in leases:
            stop = lease.binding_status.get("stop") or {}
            lease.reason = (f"{stop.get('reason_before') or lease.reason}; its workload on {host.name} was "
                            f"forgotten by {actor} ({why}): GPUs freed without a stop")
            lease.binding_status = {**lease.binding_status, "state": "forgotten", "forgotten_by": actor,
                                    "forgotten_at": now.isoformat()}
            lease.save(update_fields=["reason", "binding_status"])
            audit(actor=actor, action="lease.workload_forgotten", obj=lease, lease=lease, at=now,
                  message=f"workload on {host.name} forgotten ({why}); GPUs freed without a stop",
                  data={"host": host.name, "host_state": host.state,
                        "attempts": int(stop.get("attempts") or 0), "last_error": stop.get("error", "")}).save()
        freed = lease_free_gpus([lease.pk for lease in leases]) if leases else 0
        ids = [str(lease.pk) for lease in leases]
        audit(actor=actor, action="host.forget_workloads", obj=host, at=now,
              message=f"forgot the workloads of {len(ids)} lease(s) on {host.name} ({why}); {freed} GPU(s) freed",
              data={"leases": ids, "gpus_freed": freed, "host_state": host.state, "force": force}).save()
    for pool_id in {lease.pool_id for lease in leases}:
        transaction.on_commit(partial(request_pass, pool_id))
    return ids, freed


def _holding_leases_locked(host: Host) -> list[Lease]:
    """The host's granted and bound leases, their rows locked FOR UPDATE (only theirs: `of`), in
    the model's order (newest first), the order the pass locks its preemption victims in. A
    lease another transaction ended while this one waited for it is left out: PostgreSQL checks
    the state again on the row it waited for."""
    return list(Lease.objects.select_for_update(of=("self",)).select_related("priority_class", "team")
                .filter(host_id=host.pk, state__in=HOLDING_STATES))


def _text(key: str, value: int | None) -> str:
    if value is None:
        return "all" if key == "lending_limit" else "none"
    return str(value)


def _quota_check(guaranteed: int, limit: int | None, lending_limit: int | None) -> None:
    """Raise DomainError (code `invalid_quota`, the field named in `details`) for values a quota
    may not take."""
    if limit is not None and limit < guaranteed:
        message = (f"limit {limit} is below guaranteed {guaranteed}: a team must be able to reach "
                   "its guarantee")
        raise DomainError(message, code="invalid_quota", details={"limit": [message]})
    if lending_limit is not None and not 0 <= lending_limit <= guaranteed:
        message = (f"lending_limit {lending_limit} is above guaranteed {guaranteed}: a team lends "
                   "at most its guarantee" if lending_limit > guaranteed
                   else f"lending_limit must be 0 or more, got {lending_limit}")
        raise DomainError(message, code="invalid_quota", details={"lending_limit": [message]})


def quota_set(*, quota: Quota, guaranteed: int, limit: int | None, lending_limit: int | None,
              actor: str) -> Quota:
    """Set a quota's guaranteed share, limit (None: may borrow all idle GPUs) and lending limit
    (the part of the guarantee others may borrow while it is idle; None: all of it); audited.

    Raises DomainError (code `invalid_quota`, the field in `details`) when the limit is below
    the guarantee (a team could then never reach what it is promised) or the lending limit above
    it (a team lends at most its guarantee: lowering the guarantee below the lending limit in
    force is refused too), or the guarantee breaks the team tree's rule in the pool (a parent's
    guarantee bounds the sum of its children's: `teams_tree.quota_tree_check`); nothing is
    written then. A call that changes nothing writes nothing."""
    _quota_check(guaranteed, limit, lending_limit)
    with transaction.atomic():
        quota = Quota.objects.select_for_update(of=("self",)).select_related("team", "pool").get(pk=quota.pk)
        if guaranteed != quota.guaranteed:
            quota_tree_check(quota=quota, guaranteed=guaranteed)
        before = {"guaranteed": quota.guaranteed, "limit": quota.limit, "lending_limit": quota.lending_limit}
        after = {"guaranteed": guaranteed, "limit": limit, "lending_limit": lending_limit}
        changed = {k: v for k, v in after.items() if before[k] != v}
        if not changed:
            return quota
        quota.guaranteed, quota.limit, quota.lending_limit = guaranteed, limit, lending_limit
        quota.save(update_fields=["guaranteed", "limit", "lending_limit"])
        audit(actor=actor, action="quota.update", obj=quota,
              message=f"quota {quota.team.name}@{quota.pool.name}: " + ", ".join(
                  f"{k} {_text(k, before[k])} → {_text(k, v)}" for k, v in changed.items()),
              data={"before": {k: before[k] for k in changed}, "after": changed}).save()
    # A larger guarantee, limit or lending limit may let waiting leases start (or reclaim
    # borrowed GPUs).
    transaction.on_commit(lambda: request_pass(quota.pool_id))
    return quota


def team_set_weight(*, team: Team, weight: float, actor: str) -> Team:
    """Set a team's fair-share weight (> 0); audited. Raises DomainError for a weight ≤ 0."""
    if weight <= 0:
        raise DomainError("a fair-share weight must be above 0", code="invalid_weight")
    with transaction.atomic():
        team = Team.objects.select_for_update().get(pk=team.pk)
        if team.weight == weight:
            return team
        before = team.weight
        team.weight = weight
        team.save(update_fields=["weight"])
        audit(actor=actor, action="team.update", obj=team,
              message=f"team {team.name}: weight {before:g} → {weight:g}",
              data={"before": {"weight": before}, "after": {"weight": weight}}).save()
    pool_ids = set(team.quotas.values_list("pool_id", flat=True))
    transaction.on_commit(lambda: [request_pass(pid) for pid in pool_ids])
    return team
