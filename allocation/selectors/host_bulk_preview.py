"""What cordoning, draining or uncordoning many hosts at once would do, shown before anything is
written (read-only), in the terms of a capacity move's preview (`capacity_preview`):

- per host, its state now and after (hosts already so are left alone);
- per pool, the GPUs in service (free or leased) before and after, against the guarantees given in
  it (a drain of a tenth of the fleet can leave guarantees that no longer fit);
- per lease, what happens to it: preempted by the drain of its host, running on (a cordon), or
  preempted or granted by the next scheduling pass (the real policy run on the snapshot the engine
  would build after the change), as a capacity move's preview says.

`allocation.services.host_bulk.hosts_bulk_action` recomputes this under the pools' scheduling
locks and acts only if its fingerprint still matches what the admin saw.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from django.db.models import Sum
from django.utils import timezone

from allocation.choices import HOLDING_STATES
from allocation.engine.snapshot import build_snapshot
from allocation.models import Lease, Quota
from allocation.selectors.capacity_preview import (
    ImpactSummary,
    LeaseImpact,
    PoolChange,
    _fingerprint,
    _next_pass,
)
from core.errors import DomainError
from inventory.choices import AdminState, GpuState, HostState
from inventory.models import Gpu, Host, Pool
from inventory.selectors import capacity_units

# verb -> the admin state it leaves a host in
TARGET = {"cordon": AdminState.CORDONED, "drain": AdminState.DRAINING, "uncordon": AdminState.NONE}
IN_SERVICE = (GpuState.FREE, GpuState.LEASED)


@dataclass(frozen=True)
class HostChange:
    host_id: int
    name: str
    state: str  # derived state now
    admin_before: str
    admin_after: str
    units: int  # capacity units on it
    leases: int  # leases holding GPUs on it

    @property
    def changes(self) -> bool:
        return self.admin_before != self.admin_after


@dataclass(frozen=True)
class BulkPreview(ImpactSummary):
    verb: str
    host_ids: tuple[int, ...]  # every host asked for, in name order
    hosts: tuple[HostChange, ...]
    pools: tuple[PoolChange, ...]  # capacity here: GPUs in service (free or leased)
    leases: tuple[LeaseImpact, ...]
    notes: tuple[str, ...]
    fingerprint: str

    @property
    def changing(self) -> tuple[HostChange, ...]:
        return tuple(h for h in self.hosts if h.changes)

    @property
    def can_confirm(self) -> bool:
        return bool(self.changing)



def hosts_bulk_preview(*, host_ids: Sequence[int], verb: str, next_pass: bool = True) -> BulkPreview:
    """What `verb` (cordon, drain, uncordon) on the hosts `host_ids` would do; writes nothing.
    Raises DomainError (code `invalid_action`) for another verb. `next_pass=False` leaves out the
    next scheduling pass's impacts (the policy runs twice per affected pool)."""
    if verb not in TARGET:
        raise DomainError(f"unknown host action {verb!r}; use one of {', '.join(TARGET)}", code="invalid_action")
    hosts = list(Host.objects.filter(pk__in=list(host_ids)).order_by("name", "pk"))
    want = TARGET[verb]
    changing = {h.pk for h in hosts if h.admin_state != want}
    units = Counter(capacity_units().filter(host_id__in=[h.pk for h in hosts]).values_list("host_id", flat=True))
    leases = list(Lease.objects.filter(host_id__in=changing, state__in=HOLDING_STATES)
                  .select_related("team", "pool", "priority_class", "host").order_by("team__name", "pk"))
    held = Counter(lease.host_id for lease in leases)
    changes = tuple(HostChange(h.pk, h.name, h.state, h.admin_state, want, units[h.pk], held[h.pk]) for h in hosts)
    pools = _pool_changes(verb, changing)
    impacts = [_impact(lease, verb) for lease in leases]
    if next_pass and changing:
        impacts += _next_pass_impacts(verb, changing, {str(x.pk) for x in leases}, exclude={str(x.pk) for x in leases})
    notes = _notes(verb, changes)
    return BulkPreview(
        verb=verb, host_ids=tuple(h.pk for h in hosts), hosts=changes, pools=pools, leases=tuple(impacts),
        notes=tuple(notes),
        fingerprint=_fingerprint(verb, sorted(changing), [(p.pool, p.capacity_before, p.capacity_after) for p in pools],
                                 sorted((i.lease_id, i.outcome) for i in impacts)))


def _pool_changes(verb: str, changing: set[int]) -> tuple[PoolChange, ...]:
    """GPUs in service per pool touched, before and after: a cordon or drain takes the free and
    leased GPUs of the hosts out; an uncordon brings back their cordoned GPUs on hosts that
    report ready (an offline or unhealthy GPU stays out)."""
    units = capacity_units()
    touched = units.filter(host_id__in=changing)
    if verb == "uncordon":
        moved = touched.filter(state=GpuState.CORDONED, host__reported_state=HostState.READY)
    else:
        moved = touched.filter(state__in=IN_SERVICE)
    delta = Counter(moved.values_list("pool_id", flat=True))
    pool_ids = set(touched.values_list("pool_id", flat=True).distinct())
    before = Counter(units.filter(pool_id__in=pool_ids, state__in=IN_SERVICE).values_list("pool_id", flat=True))
    guaranteed = dict(Quota.objects.filter(pool_id__in=pool_ids).values_list("pool_id").annotate(s=Sum("guaranteed")))
    sign = 1 if verb == "uncordon" else -1
    return tuple(PoolChange(pool=p.name, capacity_before=before[p.pk], capacity_after=before[p.pk] + sign * delta[p.pk],
                            guaranteed_total=guaranteed.get(p.pk) or 0)
                 for p in Pool.objects.filter(pk__in=pool_ids).order_by("name"))


def _impact(lease: Lease, verb: str) -> LeaseImpact:
    host = lease.host.name if lease.host else "its host"
    if verb == "drain":
        outcome = "preempted"
        detail = (f"{host} is drained: preempted with notice; its GPUs are freed after the "
                  f"{lease.priority_class.grace_s} s grace or once its workload stops")
    else:
        outcome, detail = "keeps_running", f"keeps running on {host} until it ends"
    return LeaseImpact(lease_id=str(lease.pk), team=lease.team.name, pool=lease.pool.name, state=lease.state,
                       gpu_count=lease.gpu_count, gpus_moved=0, outcome=outcome, detail=detail)


def _next_pass_impacts(verb: str, changing: set[int], drained: set[str], *, exclude: set[str]) -> list[LeaseImpact]:
    """The real policy on each affected pool as it is and as it would be after the change: the
    preemptions and grants only the change causes (a drain shrinking a pool can make a team below
    its guarantee reclaim borrowed GPUs; an uncordon can let waiting leases start)."""
    now = timezone.now()
    back = set(Gpu.objects.filter(host_id__in=changing, state=GpuState.CORDONED,
                                  host__reported_state=HostState.READY).values_list("pk", flat=True))
    pool_ids = set(Gpu.objects.filter(host_id__in=changing, gone=False).values_list("pool_id", flat=True))
    new_pre: dict[str, str] = {}
    new_grant: set[str] = set()
    for pool in Pool.objects.filter(pk__in=pool_ids).order_by("name"):
        snap, _, gpu_host = build_snapshot(pool, now)
        if verb == "uncordon":
            gpus = tuple(replace(g, schedulable=True) if g.id in back else g for g in snap.gpus)
            running = snap.running
        else:
            gpus = tuple(replace(g, schedulable=False) if gpu_host.get(g.id) in changing else g for g in snap.gpus)
            running = tuple(replace(r, ending=True) if verb == "drain" and r.lease_id in drained else r
                            for r in snap.running)
        before_d, after_d = _next_pass(snap), _next_pass(replace(snap, gpus=gpus, running=running))
        old_pre = {p.lease_id for p in before_d.preemptions}
        new_pre.update({p.lease_id: p.reason for p in after_d.preemptions if p.lease_id not in old_pre})
        new_grant |= {g.lease_id for g in after_d.grants} - {g.lease_id for g in before_d.grants}
    rows = {str(x.pk): x for x in Lease.objects.filter(pk__in=[*new_pre, *new_grant]).select_related("team", "pool")}
    impacts = []
    for lid in sorted(set(new_pre) | new_grant):
        if lid in exclude or lid not in rows:
            continue
        lease = rows[lid]
        pre = lid in new_pre
        impacts.append(LeaseImpact(
            lease_id=lid, team=lease.team.name, pool=lease.pool.name, state=lease.state, gpu_count=lease.gpu_count,
            gpus_moved=0, outcome="preempted_next_pass" if pre else "granted_next_pass",
            detail=f"the next scheduling pass would preempt it: {new_pre[lid]}" if pre
            else "pending now; the next scheduling pass could grant it"))
    return impacts


def _notes(verb: str, hosts: Sequence[HostChange]) -> list[str]:
    notes = []
    same = [h.name for h in hosts if not h.changes]
    if same:
        shown = ", ".join(same[:10]) + (f" … ({len(same)} in all)" if len(same) > 10 else "")
        notes.append(f"Already {TARGET[verb] or 'uncordoned'}, left alone: {shown}.")
    if verb == "uncordon" and any(h.admin_before == AdminState.DRAINING for h in hosts):
        notes.append("Uncordoning a draining host stops the drain: leases it preempted stay preempted.")
    offline = [h.name for h in hosts if h.changes and h.state == HostState.OFFLINE]
    if offline:
        notes.append(f"{len(offline)} host(s) are offline; the change applies when they answer again.")
    return notes
