"""Allocated but idle at fleet scale: 2,000 hosts, 16,000 GPUs all leased (bench_dashboard's
fleet), 40 minutes of one-minute samples on every GPU, a quarter of them idle.

    .venv/bin/python bench/bench_idle_gpus.py [--hosts 2000] [--repeat 5] [--db NAME] [--reuse]

Times: the first idle check (every link new: each GPU's samples of the idle time read), a steady
check (one new minute of samples per GPU, the beat's case), `/metrics`, the fleet page, and the
usage report over a week of idle rows (10 teams × 20 users, one row each an hour). Medians of `--repeat`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _django


def _median(fn: Callable[[], object], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def samples(minutes: int, start_minute: int = 0) -> None:
    """`minutes` one-minute samples on every GPU, the last one a minute after the last one's
    start; GPUs whose id is divisible by 4 read 1 %, the others 60 %."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT clock_timestamp()")
        now = cur.fetchone()[0]
        cur.execute("INSERT INTO inventory_gpusample (gpu_id, at, utilization_pct) "
                    "SELECT g.id, %s - (%s - m) * interval '1 minute', CASE WHEN g.id %% 4 = 0 THEN 1 ELSE 60 END "
                    "FROM inventory_gpu g CROSS JOIN generate_series(%s, %s) m",
                    [now, start_minute + minutes - 1, start_minute, start_minute + minutes - 1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--db", default="gpupool_bench_idle")
    parser.add_argument("--reuse", action="store_true")
    args = parser.parse_args()
    vendor = _django.setup(args.db, fresh=not args.reuse)
    from datetime import timedelta

    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.utils import timezone

    from allocation.economy.usage import usage_report
    from allocation.models import IdleUsage, Lease, LeaseGpu
    from allocation.selectors.idle import idle_gpus, idle_gpus_by_team_and_pool
    from allocation.services.idle_gpus import gpus_idle_check
    from bench.bench_dashboard import _built, build
    from inventory.models import GpuSample

    settings.GPUPOOL = {**settings.GPUPOOL, "IDLE_FOR_S": 1800}
    if not _built():
        build(args.hosts, 0)
    Lease.objects.update(granted_at=timezone.now() - timedelta(hours=2))
    GpuSample.objects.all().delete()
    LeaseGpu.objects.update(idle_since=None, idle_seen_at=None, idle_flagged_at=None, idle_metered_until=None)
    samples(40)
    gpus = LeaseGpu.objects.filter(active=True).count()
    start = time.perf_counter()
    first = gpus_idle_check()
    first_s = time.perf_counter() - start

    steady_times = []
    for i in range(args.repeat + 1):
        samples(1, start_minute=-1 - i)  # the next minute's sample
        start = time.perf_counter()
        gpus_idle_check()
        steady_times.append(time.perf_counter() - start)
    steady_s = statistics.median(steady_times[1:])
    flagged = LeaseGpu.objects.filter(active=True, idle_flagged_at__isnull=False).count()

    admin, _ = get_user_model().objects.get_or_create(username="admin", defaults={"is_staff": True})
    client = Client()
    client.force_login(admin)
    metrics_s = _median(lambda: client.get("/metrics"), args.repeat)
    fleet_s = _median(lambda: client.get("/fleet/"), args.repeat)
    # What the two add: the gauge's grouped count, the flags of one fleet page's GPUs (50 hosts).
    gauge_s = _median(idle_gpus_by_team_and_pool, args.repeat)
    page = list(LeaseGpu.objects.filter(active=True).order_by("gpu_id").values_list("gpu_id", flat=True)[:400])
    tiles_s = _median(lambda: idle_gpus(gpu_ids=page), args.repeat)

    # A week of idle rows: every team, 20 users each, every hour.
    IdleUsage.objects.all().delete()
    users = [get_user_model().objects.get_or_create(username=f"idle-{i}")[0].pk for i in range(20)]
    with connection.cursor() as cur:
        cur.execute("INSERT INTO allocation_idleusage (team_id, pool_id, user_id, model, hour, gpu_seconds) "
                    "SELECT t.id, p.id, u, 'NVIDIA H100 80GB HBM3', "
                    "date_trunc('hour', now()) - h * interval '1 hour', 7200 "
                    "FROM allocation_team t CROSS JOIN inventory_pool p CROSS JOIN unnest(%s::bigint[]) u "
                    "CROSS JOIN generate_series(1, 168) h", [users])
    rows = IdleUsage.objects.count()
    now = timezone.now()
    report_s = _median(lambda: usage_report(since=now - timedelta(days=7), until=now, group_by="team", now=now),
                       args.repeat)
    report_day_s = _median(lambda: usage_report(since=now - timedelta(days=7), until=now, group_by="day", now=now),
                           args.repeat)

    print(f"{vendor}: {args.hosts} hosts, {gpus:,} leased GPUs, {flagged:,} flagged idle")
    print(f"first check (40 samples a GPU read back): {first_s * 1000:.0f} ms ({first.flagged:,} flagged)")
    print(f"steady check (one new sample a GPU): {steady_s * 1000:.0f} ms")
    print(f"/metrics: {metrics_s * 1000:.0f} ms, of which the idle gauge {gauge_s * 1000:.1f} ms; "
          f"/fleet/: {fleet_s * 1000:.0f} ms, of which a page's idle flags {tiles_s * 1000:.1f} ms")
    print(f"usage report over a week, {rows:,} idle rows: by team {report_s * 1000:.0f} ms, "
          f"by day {report_day_s * 1000:.0f} ms")


if __name__ == "__main__":
    main()
