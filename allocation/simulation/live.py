"""`simulate --fleet live`: the current inventory of one pool as a replay's fleet.

The GPUs are read by the engine's own reading (`allocation.engine.snapshot.read_pool`), so every
field a scheduling pass gives the policy about a GPU (its host, model, memory, MIG profile,
time-slicing, versions, the workloads its source starts, its placement domain, and whatever
`GpuView` carries next) reaches the replay unchanged: the simulator asks the very question a
pass would, of the very same views. The replay adds only the tags of its trace's selectors
(`allocation.simulation.where.tag_fleet`), as a pass adds those of its pending leases'.

What the replay is (README, "Simulating the live fleet"): a what-if of the pool's *capacity*,
not of its current leases. Every GPU the engine would call schedulable (host ready, healthy, not
foreign, not a MIG parent whose slices are in the pool) is free at t=0, leased or not; a GPU out
of service now (host offline, cordoned or draining, unhealthy, foreign, or still held by a lease
of another pool) stays out for the whole replay. Teams, quotas, priority classes, the fair-share
half-life and the pool's own settings are the database's, or a config file's (`--config`), in
which case only the fleet is live.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.utils import timezone

from allocation.engine.snapshot import read_pool
from allocation.models import PoolScheduling, PriorityClass
from allocation.policy.types import GpuView, PoolView
from allocation.simulation.replay import SimConfig
from inventory.models import Gpu, Host, Pool


class LiveFleetError(ValueError):
    """The pool named cannot be replayed (unknown, or nothing in it to schedule)."""


@dataclass
class LiveFleet:
    """The replay's input (`config.gpus` is the live fleet) and what it is made of:
    `fleet[source] = {kind, hosts, gpus, models, mig_slices, time_sliced, out_of_service}`."""

    config: SimConfig
    fleet: dict[str, dict[str, Any]]


def live_fleet(pool_name: str, settings: SimConfig | None = None) -> LiveFleet:
    """The pool's live fleet, with the database's teams, quotas, classes and pool settings, or
    those of `settings` (a config file's; its pool of the same name, if any, for the pool's
    settings). Raises LiveFleetError for an unknown pool or one without a schedulable GPU."""
    pool = Pool.objects.filter(name=pool_name).first()
    if pool is None:
        known = ", ".join(Pool.objects.order_by("name").values_list("name", flat=True)) or "none"
        raise LiveFleetError(f"unknown pool {pool_name!r} (known pools: {known})")
    read = read_pool(pool, timezone.now())
    snap = read.snapshot
    if not snap.gpus:
        raise LiveFleetError(f"pool {pool_name!r} has no GPUs: nothing to replay on (run `discover`, "
                             "or move GPUs into it)")
    if not any(g.schedulable for g in snap.gpus):
        raise LiveFleetError(f"pool {pool_name!r} has {len(snap.gpus)} GPUs but none in service "
                             "(hosts offline, cordoned or draining, GPUs unhealthy or foreign)")
    hosts = {pk: (source, kind) for pk, source, kind in Host.objects.filter(
        pk__in=set(read.gpu_host.values())).values_list("pk", "source__name", "source__kind")}
    gpu_sources = {gpu: hosts[host][0] for gpu, host in read.gpu_host.items()}
    fleet = _describe(pool, snap.gpus, read.gpu_host, hosts)
    if settings is not None:
        live_pool = _live_pool_view(pool, snap.pools[pool.name])
        return LiveFleet(replace(settings, gpus=snap.gpus, gpu_sources=gpu_sources,
                                 pools={pool.name: settings.pools.get(pool.name, live_pool)}), fleet)
    idle = {pc.name: pc.idle_reclaim for pc in PriorityClass.objects.filter(idle_for_s__isnull=False)}
    classes = {name: replace(view, idle_reclaim=idle.get(name)) for name, view in snap.priority_classes.items()}
    return LiveFleet(SimConfig(gpus=snap.gpus, teams={t.name: t.weight for t in snap.teams.values()},
                               quotas=dict(snap.quotas), priority_classes=classes,
                               half_life_s=snap.half_life_s,
                               pools={pool.name: _live_pool_view(pool, snap.pools[pool.name])},
                               gpu_sources=gpu_sources,
                               parents={t.name: t.parent for t in snap.teams.values() if t.parent}), fleet)


def _live_pool_view(pool: Pool, view: PoolView) -> PoolView:
    """The pool's settings as a pass reads them, with its idle rule (the idle task's, which a
    pass does not read) and no fair-share preemption yet: the replay has its own clock."""
    own = PoolScheduling.objects.filter(pool_id=pool.pk).first()
    return replace(view, last_fair_share_preemption=None,
                   idle_reclaim=own.idle_reclaim if own is not None else None)


def _describe(pool: Pool, gpus: Sequence[GpuView], gpu_host: dict[int, int],
              hosts: dict[int, tuple[str, str]]) -> dict[str, dict[str, Any]]:
    """Per source: its kind, the hosts with a GPU in service, the GPUs in service (what the
    replay may grant: MIG slices and time-sliced replicas each count one, as the pool counts
    them), per model, and those listed but out of service (MIG parents split into slices are
    neither: their slices stand for them)."""
    parents = set(Gpu.objects.filter(pool=pool, parent__isnull=False, gone=False).values_list("parent_id", flat=True))
    out: dict[str, dict[str, Any]] = {}
    in_service: dict[str, set[int]] = defaultdict(set)
    models: dict[str, Counter[str]] = defaultdict(Counter)
    for g in gpus:
        host_id = gpu_host[g.id]
        source, kind = hosts[host_id]
        row = out.setdefault(source, {"kind": kind, "hosts": 0, "gpus": 0, "models": {}, "mig_slices": 0,
                                      "time_sliced": 0, "out_of_service": 0})
        if g.schedulable:
            in_service[source].add(host_id)
            row["gpus"] += 1
            row["mig_slices"] += bool(g.mig_profile)
            row["time_sliced"] += g.time_sliced
            models[source][g.model] += 1
        elif g.id not in parents:
            row["out_of_service"] += 1
    for source, row in out.items():
        row["hosts"] = len(in_service[source])
        row["models"] = dict(sorted(models[source].items()))
    return dict(sorted(out.items()))
