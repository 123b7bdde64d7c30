"""The scheduling engine end to end on the database: snapshot → policy → apply.

    python bench/bench_engine.py [--hosts 250] [--gpus-per-host 8] [--requests 1000]

Measures (1) a pass that grants 1,000 pending 1–8-GPU requests at once, (2) a no-change pass over
the same state with a backlog that cannot fit, and (3) the policy alone on the same snapshot
(the baseline measured in the same run: everything above it is database work).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _django


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=250)
    parser.add_argument("--gpus-per-host", type=int, default=8)
    parser.add_argument("--requests", type=int, default=1000)
    args = parser.parse_args()
    vendor = _django.setup("gpupool_bench_engine")

    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from allocation.apply import config_apply
    from allocation.config import parse_config
    from allocation.engine import build_snapshot, run_pass
    from allocation.models import Lease, PriorityClass, Team
    from allocation.policy import get_policy
    from inventory.discovery import source_discover
    from inventory.models import Pool, Source

    teams = [f"team-{i}" for i in range(8)]
    config_apply(parse_config(f"""
pools: [{{name: bench}}]
teams: [{", ".join(f"{{name: {t}, weight: {1 + i % 3}}}" for i, t in enumerate(teams))}]
quotas: [{", ".join(f"{{team: {t}, pool: bench, guaranteed: 100, limit: null}}" for t in teams)}]
priority_classes: [{{name: default, value: 0}}, {{name: high, value: 100}}]
sources: [{{name: sim, kind: simulated, pool: bench, hosts: {args.hosts}, gpus_per_host: {args.gpus_per_host}}}]
"""))
    source_discover(source=Source.objects.get(name="sim"))
    pool = Pool.objects.get(name="bench")
    user = get_user_model().objects.create(username="bench")
    rng = random.Random(7)
    team_rows = {t.name: t for t in Team.objects.all()}
    pc = PriorityClass.objects.get(name="default")
    capacity = args.hosts * args.gpus_per_host
    sizes, total = [], 0
    while len(sizes) < args.requests:  # requests that together fit the fleet, so all are granted
        size = rng.choice([1, 1, 1, 2, 2, 4])
        if total + size > capacity:
            size = 1
        sizes.append(size)
        total += size
    Lease.objects.bulk_create([Lease(team=team_rows[rng.choice(teams)], user=user, pool=pool,
                                     priority_class=pc, gpu_count=s, ttl_seconds=3600) for s in sizes])
    print(f"fleet: {args.hosts} hosts × {args.gpus_per_host} = {capacity} GPUs on {vendor}; "
          f"{args.requests} pending requests asking {total} GPUs")

    snapshot, _, _ = build_snapshot(pool, timezone.now())
    t0 = time.perf_counter()
    get_policy("fair")(snapshot)
    policy_s = time.perf_counter() - t0
    with CaptureQueriesContext(connection) as q:
        t0 = time.perf_counter()
        report = run_pass([pool.pk])[0]
        grant_s = time.perf_counter() - t0
    print(f"baseline (policy alone on that snapshot): {policy_s * 1000:7.1f} ms")
    print(f"pass granting {len(report.granted):4d} leases: {grant_s * 1000:7.1f} ms "
          f"({grant_s / policy_s:4.1f}× policy)  {len(q)} SQL queries")
    # A backlog that cannot fit: the next passes change nothing.
    Lease.objects.bulk_create([Lease(team=team_rows[t], user=user, pool=pool, priority_class=pc,
                                     gpu_count=args.gpus_per_host, ttl_seconds=3600) for t in teams * 25])
    run_pass([pool.pk])
    with CaptureQueriesContext(connection) as q:
        t0 = time.perf_counter()
        run_pass([pool.pk])
        idle_s = time.perf_counter() - t0
    print(f"no-change pass ({Lease.objects.filter(state='pending').count()} pending, "
          f"{Lease.objects.filter(state='granted').count()} running): {idle_s * 1000:7.1f} ms  {len(q)} SQL queries")
    print(f"goals: 1,000 grants < 1 s: {'met' if grant_s < 1 else 'MISSED'}; "
          f"no-change pass < 200 ms: {'met' if idle_s < 0.2 else 'MISSED'}")


if __name__ == "__main__":
    main()
