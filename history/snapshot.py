"""The minute's picture: what each pool, team and GPU model looks like now, as unsaved points.

A fixed number of grouped queries whatever the size of the fleet (pool counts, pending leases,
telemetry per model, quotas, held GPUs, pending leases per team)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.db.models import Avg, Count

from allocation.choices import LeaseState
from allocation.models import Lease, Quota
from allocation.selectors import Held, Pending, pending_by_pool, team_gpus_held
from history.choices import Step
from history.models import ModelPoint, PoolPoint, TeamPoolPoint
from inventory.choices import GpuState
from inventory.models import Gpu, Pool
from inventory.selectors import pool_stats


def pool_and_model_points(at: datetime) -> tuple[list[PoolPoint], list[ModelPoint]]:
    """Every pool's point (pools without GPUs too: their queue still matters) and one point per
    pool and GPU model that reports utilisation."""
    pool_ids = list(Pool.objects.values_list("pk", flat=True))
    stats = pool_stats(pool_ids)
    pending = pending_by_pool()
    models: list[ModelPoint] = []
    util: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for pool_id, model, n, mean in _utilisation_by_model():
        models.append(ModelPoint(pool_id=pool_id, model=model[:128], step=Step.MINUTE, at=at, gpus=n,
                                 util_pct=mean))
        util[pool_id][0] += mean * n
        util[pool_id][1] += n
    pools = []
    for pool_id in pool_ids:
        counts = stats.get(pool_id, {"capacity": 0, "allocated": 0, "free": 0})
        queue, gpus = pending.get(pool_id, Pending(0, 0))
        total, reporting = util.get(pool_id, (0.0, 0.0))
        pools.append(PoolPoint(pool_id=pool_id, step=Step.MINUTE, at=at, capacity=counts["capacity"],
                               allocated=counts["allocated"], free=counts["free"], pending_gpus=gpus,
                               queue_length=queue, queue_length_max=queue,
                               util_pct=total / reporting if reporting else None))
    return pools, models


def _utilisation_by_model() -> list[tuple[int, str, int, float]]:
    """(pool, model, GPUs reporting, mean utilisation) from each GPU's latest telemetry. Whole GPUs
    only: nvidia-smi reports utilisation per physical GPU, not per MIG slice. A GPU of an offline
    host keeps its last reading, which is stale: left out."""
    rows = (Gpu.objects.filter(gone=False, parent__isnull=True, utilization_pct__isnull=False)
            .exclude(state=GpuState.OFFLINE).values_list("pool_id", "model")
            .annotate(n=Count("pk"), mean=Avg("utilization_pct")).order_by())
    return [(pool_id, model, n, float(mean)) for pool_id, model, n, mean in rows]


def team_points(at: datetime) -> list[TeamPoolPoint]:
    """One point per team and pool that has a quota, holds GPUs or waits for some."""
    quotas = {(t, p): (g, lim) for t, p, g, lim in
              Quota.objects.values_list("team_id", "pool_id", "guaranteed", "limit")}
    held = team_gpus_held()
    waits: dict[tuple[int, int], list[float]] = defaultdict(list)
    asked: dict[tuple[int, int], int] = defaultdict(int)
    for team_id, pool_id, gpus, created in Lease.objects.filter(state=LeaseState.PENDING).values_list(
            "team_id", "pool_id", "gpu_count", "created_at"):
        waits[(team_id, pool_id)].append(max((at - created).total_seconds(), 0.0))
        asked[(team_id, pool_id)] += gpus
    points = []
    for key in quotas.keys() | held.keys() | asked.keys():
        guaranteed, limit = quotas.get(key, (0, None))
        now_held, borrowed = held.get(key, Held(0, 0))
        ages = waits.get(key)
        points.append(TeamPoolPoint(
            team_id=key[0], pool_id=key[1], step=Step.MINUTE, at=at, held=now_held, held_max=now_held,
            borrowed=borrowed, guaranteed=guaranteed, limit=limit, pending_gpus=asked.get(key, 0),
            wait_s=sum(ages) / len(ages) if ages else None, wait_max_s=max(ages) if ages else None))
    return points
