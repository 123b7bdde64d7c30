"""The scheduling engine end to end on the database: snapshot → policy → apply.

    python bench/bench_engine.py [--hosts 2000] [--gpus-per-host 8] [--requests 5000] [--backlog 200]
                                 [--queue 2000] [--repeat 3] [--profile DIR] [--sql] [--explain]

Measures, on one fleet (PostgreSQL tables ANALYZEd first, as autovacuum keeps a live database):
  (1) a pass that grants `--requests` pending 1–4-GPU requests at once, starting cold (no views
      kept from an earlier pass, as in a new worker process);
  (2) a no-change pass: the rest of the fleet is filled first (one lease per partly free host,
      asking exactly what it has free), then a backlog of `--backlog` whole-host requests is added,
      which cannot fit now but could on an empty fleet; one pass writes their first explanations,
      and the next passes change nothing (the first in its process, then the median of
      `--repeat`; they must write nothing);
  (3) a long queue (`--queue` more whole-host requests): passes that free one host and grant one
      request, each shifting the place of every request behind it, with the number of queue
      explanations rewritten.
Baselines measured in the same run: the pure policy alone on the same snapshot, cold and without
garbage collection pauses (everything above it is database work), and a "raw SQL floor": one
multi-row INSERT of the pass's link rows into an indexed copy of the LeaseGpu table, and the
raw-cursor read of the GPU and lease rows.
Runs against the previous engine too (for before/after figures in one session).
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gc
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _django


def timed(fn: Callable[[], Any], repeat: int) -> float:
    """Median wall time of `repeat` calls."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--gpus-per-host", type=int, default=8)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--backlog", type=int, default=200)
    parser.add_argument("--queue", type=int, default=2000, help="whole-host requests queued for (3); 0: skip")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", default="", help="directory for cProfile dumps of the passes")
    parser.add_argument("--sql", action="store_true", help="print the SQL of the measured passes")
    parser.add_argument("--explain", action="store_true",
                        help="PostgreSQL: print EXPLAIN ANALYZE of every statement of the grant pass (auto_explain)")
    args = parser.parse_args()
    vendor = _django.setup("gpupool_bench_engine_wt")
    bench = EngineBench.on_new_fleet(args, vendor)
    grant_s = bench.grant_pass()
    idle_s = bench.no_change_pass()
    if args.queue:
        bench.long_queue()
    print(f"goals: {args.requests} grants ≤ 1 s: {'met' if grant_s <= 1 else 'MISSED'}; "
          f"no-change pass ≤ 150 ms: {'met' if idle_s <= 0.15 else 'MISSED'}")


def _forget() -> None:
    """Drop the views the engine keeps between passes, so the next pass starts cold (a no-op on an
    engine that reuses nothing between passes)."""
    try:
        from allocation.engine.snapshot import forget
    except ImportError:
        return
    forget()


@dataclasses.dataclass
class EngineBench:
    """The bench pool (a simulated fleet, eight teams) and the measurements made on it."""

    args: Any
    vendor: str
    pool: Any
    user: Any
    teams: list[str]
    team_rows: dict[str, Any]
    priority_class: Any
    policy: Callable[[Any], Any]
    rng: random.Random = dataclasses.field(default_factory=lambda: random.Random(7))

    @property
    def capacity(self) -> int:
        return self.args.hosts * self.args.gpus_per_host

    @classmethod
    def on_new_fleet(cls, args: Any, vendor: str) -> EngineBench:
        """Apply the bench configuration (pool, teams, quotas, simulated source) and discover it."""
        from django.contrib.auth import get_user_model

        from allocation.config import parse_config
        from allocation.config.apply import config_apply
        from allocation.models import PriorityClass, Team
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
        return cls(args=args, vendor=vendor, pool=Pool.objects.get(name="bench"),
                   user=get_user_model().objects.create(username="bench"), teams=teams,
                   team_rows={t.name: t for t in Team.objects.all()},
                   priority_class=PriorityClass.objects.get(name="default"), policy=get_policy("fair"))

    def add(self, sizes: list[int], team_names: list[str]) -> None:
        """Pending requests of these sizes, by these teams."""
        from allocation.models import Lease

        Lease.objects.bulk_create([Lease(team=self.team_rows[t], user=self.user, pool=self.pool,
                                         priority_class=self.priority_class, gpu_count=s, ttl_seconds=3600)
                                   for s, t in zip(sizes, team_names, strict=True)])

    def round_robin(self, n: int) -> list[str]:
        """`n` team names, taking the teams in turn."""
        return [self.teams[i % len(self.teams)] for i in range(n)]

    def counts(self) -> str:
        from django.db.models import Count

        from allocation.models import Lease

        by_state = dict(Lease.objects.filter(pool=self.pool).values_list("state").annotate(n=Count("pk")))
        return f"{by_state.get('pending', 0)} pending, {by_state.get('granted', 0)} running"

    def policy_alone(self) -> float:
        """Median time of the policy alone on the pool's snapshot. Cold, as in a pass over a
        changed fleet: the policy memoises its indexes by the identity of the GPU tuple (and of the
        running views), so each call gets a new tuple."""
        from django.utils import timezone

        from allocation.engine import build_snapshot

        snapshot, _, _ = build_snapshot(self.pool, timezone.now())
        times = []
        for _ in range(self.args.repeat):
            cold = dataclasses.replace(snapshot, gpus=tuple(list(snapshot.gpus)))
            gc.collect()  # and no collection while it runs: the pure computing time
            gc.disable()
            t0 = time.perf_counter()
            self.policy(cold)
            times.append(time.perf_counter() - t0)
            gc.enable()
        return statistics.median(times)

    def measured_pass(self, label: str) -> tuple[float, Any, list[str]]:
        """One engine pass over the pool: its wall time, report and SQL (printed with --sql,
        profiled into --profile)."""
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        from allocation.engine import run_pass

        profiler = cProfile.Profile() if self.args.profile else None
        with CaptureQueriesContext(connection) as q:
            if profiler:
                profiler.enable()
            t0 = time.perf_counter()
            report = run_pass([self.pool.pk])[0]
            seconds = time.perf_counter() - t0
            if profiler:
                profiler.disable()
                Path(self.args.profile).mkdir(parents=True, exist_ok=True)
                profiler.dump_stats(str(Path(self.args.profile) / f"{label}.prof"))
        sqls = [query["sql"] for query in q.captured_queries]
        if self.args.sql:
            print(f"-- {label}: {len(sqls)} queries")
            for sql in sqls:
                print(f"   {sql[:200]}")
        return seconds, report, sqls

    def analyze(self) -> None:
        """Planner statistics, as autovacuum keeps them on a live database (a fresh bench database
        has none, and the planner then guesses a handful of rows per table)."""
        from django.db import connection

        with connection.cursor() as cur:
            cur.execute("ANALYZE")

    def fitting_sizes(self) -> list[int]:
        """`--requests` sizes of 1-4 GPUs that together fit the fleet."""
        sizes: list[int] = []
        total = 0
        while len(sizes) < self.args.requests:
            size = self.rng.choice([1, 1, 1, 2, 2, 4])
            if total + size > self.capacity:
                size = 1
            sizes.append(size)
            total += size
        return sizes

    def grant_pass(self) -> float:
        """(1) One pass granting every request: requests that together fit the fleet."""
        from django.db import connection

        from allocation.models import LeaseGpu

        args = self.args
        sizes = self.fitting_sizes()
        self.add(sizes, [self.rng.choice(self.teams) for _ in sizes])
        print(f"fleet: {args.hosts} hosts × {args.gpus_per_host} = {self.capacity} GPUs on {self.vendor}; "
              f"{args.requests} pending requests asking {sum(sizes)} GPUs")
        self.analyze()
        policy_s = self.policy_alone()
        _forget()  # the pass starts cold: it builds every view, and the policy its indexes
        if args.explain:
            _auto_explain(connection, on=True)
        grant_s, report, sqls = self.measured_pass("grant")
        if args.explain:
            _auto_explain(connection, on=False)
        links = LeaseGpu.objects.filter(active=True).count()
        print(f"baseline (policy alone on that snapshot, median of {args.repeat}): {policy_s * 1000:7.1f} ms")
        print(f"pass granting {len(report.granted):5d} leases ({links} link rows): {grant_s * 1000:7.1f} ms "
              f"({grant_s / policy_s:5.1f}× policy)  {len(sqls)} SQL queries, {_writes(sqls)} writes")
        floor_s = _insert_floor(connection, links)
        print(f"raw SQL floor: one multi-row INSERT of {links} link rows: {floor_s * 1000:7.1f} ms "
              f"({floor_s / policy_s:5.1f}× policy)")
        return grant_s

    def fill_with_backlog(self) -> None:
        """Fill every free GPU (one lease per host, asking exactly what that host has free: best
        fit places each on its host), then add a backlog of whole-host requests that cannot fit
        now, and write their first explanations."""
        from django.db.models import Count

        from allocation.engine import run_pass
        from inventory.models import Gpu

        args, pool = self.args, self.pool
        free = list(Gpu.objects.filter(pool=pool, leased=False, gone=False).values("host_id")
                    .annotate(n=Count("pk")).values_list("n", flat=True))
        self.add(free, self.round_robin(len(free)))
        run_pass([pool.pk])
        self.add([args.gpus_per_host] * args.backlog, self.round_robin(args.backlog))
        first = run_pass([pool.pk])[0]  # writes the backlog's first explanations
        assert not first.granted, "the backlog must not fit"
        print(f"fleet filled ({len(free)} filler leases), backlog of {args.backlog} × {args.gpus_per_host} GPUs "
              f"added: {self.counts()}; free GPUs: {Gpu.objects.filter(pool=pool, leased=False).count()}")

    def no_change_pass(self) -> float:
        """(2) Passes over a full fleet with a backlog: the first in its process, then the median
        of --repeat; none may write anything."""
        from django.db import connection

        args = self.args
        self.fill_with_backlog()
        self.analyze()
        policy_s = self.policy_alone()
        _forget()
        cold_s, _, cold_sqls = self.measured_pass("no-change-cold")
        runs = [self.measured_pass(f"no-change-{i}") for i in range(args.repeat)]
        idle_s = statistics.median(r[0] for r in runs)
        _, idle_report, idle_sqls = runs[-1]
        print(f"baseline (policy alone on that snapshot, median of {args.repeat}): {policy_s * 1000:7.1f} ms")
        print(f"no-change pass, first in its process ({idle_report.pending} pending): {cold_s * 1000:7.1f} ms "
              f"({cold_s / policy_s:5.1f}× policy)  {len(cold_sqls)} SQL queries, {_writes(cold_sqls)} writes")
        print(f"no-change pass ({idle_report.pending} pending, median of {args.repeat}): {idle_s * 1000:7.1f} ms "
              f"({idle_s / policy_s:5.1f}× policy)  {len(idle_sqls)} SQL queries, {_writes(idle_sqls)} writes")
        read_s = timed(lambda: _read_floor(connection, self.pool.pk), args.repeat)
        print(f"raw SQL floor: raw-cursor read of the pool's GPU and holding-lease rows: {read_s * 1000:7.1f} ms "
              f"({read_s / policy_s:5.1f}× policy)")
        if any(_writes(r[2]) for r in runs) or any(r[1].granted or r[1].preempted for r in runs):
            print("WARNING: the no-change pass changed something")
        return idle_s

    def explanations(self) -> dict[Any, list[Any]]:
        """Each pending lease's reason, queue position and estimated start."""
        from allocation.models import Lease

        return {pk: rest for pk, *rest in Lease.objects.filter(pool=self.pool, state="pending").values_list(
            "pk", "reason", "queue_position", "estimated_start")}

    def free_one_host(self) -> None:
        """Release the leases on the host of one running lease."""
        from allocation.models import Lease
        from allocation.services.leases import lease_release

        granted = Lease.objects.filter(pool=self.pool, state="granted")
        host_id = granted.values_list("host_id", flat=True).first()
        assert host_id is not None, "a running lease to end"
        for lease in granted.filter(host_id=host_id):
            lease_release(lease=lease, actor="bench")

    def long_queue(self) -> None:
        """(3) A long queue: each pass frees one host and grants one request, shifting the place of
        every request behind it. Counts the explanations rewritten (rows whose reason, position or
        estimate changed in the database): once the tail interval has passed, the whole queue;
        within it, only the head."""
        args = self.args
        self.add([args.gpus_per_host] * args.queue, self.round_robin(args.queue))
        run = self.measured_pass("queue-first")  # their first explanations
        self.analyze()
        print(f"\nqueue of {args.queue} more whole-host requests: {self.counts()}; its first pass: "
              f"{run[0] * 1000:7.1f} ms, {len(run[2])} SQL queries")
        policy_s = self.policy_alone()
        print(f"baseline (policy alone on that snapshot, median of {args.repeat}): {policy_s * 1000:7.1f} ms")
        try:
            from allocation.engine.apply import EXPLAIN_TAIL_INTERVAL_S as interval
        except ImportError:
            interval = 0.0
        for label in ("the tail interval passed", "within the tail interval"):
            if label == "the tail interval passed":
                time.sleep(interval)
            self.free_one_host()
            before = self.explanations()
            seconds, report, sqls = self.measured_pass(label)
            after = self.explanations()
            changed = sum(1 for pk, values in after.items() if before.get(pk) != values)
            print(f"pass granting {len(report.granted)} ahead of {report.pending} pending ({label}): "
                  f"{seconds * 1000:7.1f} ms ({seconds / policy_s:5.1f}× policy)  {len(sqls)} SQL queries; "
                  f"explanations rewritten: {changed}")


def _writes(sqls: list[str]) -> int:
    return sum(1 for s in sqls if s.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE", "COPY")))


def _auto_explain(connection: Any, *, on: bool) -> None:
    with connection.cursor() as cur:
        if on:
            cur.execute("LOAD 'auto_explain'")
            for setting in ("log_min_duration = 1", "log_analyze = on", "log_triggers = on",
                            "log_timing = on"):
                cur.execute(f"SET auto_explain.{setting}")
            cur.execute("SET client_min_messages = log")
            connection.connection.notices = []  # unbounded (psycopg2 keeps the last 50 by default)
        else:
            cur.execute("RESET client_min_messages")
            cur.execute("SET auto_explain.log_min_duration = -1")
    if not on:
        for notice in connection.connection.notices:
            print("\n".join(line[:200] for line in notice.splitlines()))
        connection.connection.notices.clear()


def _insert_floor(connection: Any, n: int) -> float:
    """One multi-row INSERT of `n` (lease, gpu, active) rows into a temporary copy of the link
    table with its indexes (the partial unique one included), rolled back."""
    from django.db import transaction
    from psycopg2.extras import execute_values

    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("CREATE TEMP TABLE floor_links (LIKE allocation_leasegpu INCLUDING ALL) ON COMMIT DROP")
        cur.execute("SELECT id FROM inventory_gpu ORDER BY id LIMIT %s", [n])
        gpu_ids = [r[0] for r in cur.fetchall()]
        cur.execute("SELECT id FROM allocation_lease LIMIT 1")
        lease_id = cur.fetchone()[0]
        rows = [(i, lease_id, g, True) for i, g in enumerate(gpu_ids, 1)]
        t0 = time.perf_counter()
        execute_values(cur.cursor, "INSERT INTO floor_links (id, lease_id, gpu_id, active) VALUES %s",
                       rows, page_size=len(rows))
        seconds = time.perf_counter() - t0
        transaction.set_rollback(True)
    return seconds


def _read_floor(connection: Any, pool_id: int) -> None:
    with connection.cursor() as cur:
        cur.execute("SELECT id, host_id, model, memory_mb, health, \"foreign\", leased FROM inventory_gpu "
                    "WHERE pool_id = %s", [pool_id])
        cur.fetchall()
        cur.execute("SELECT l.id, l.team_id, l.granted_at, l.expires_at, lg.gpu_id FROM allocation_lease l "
                    "JOIN allocation_leasegpu lg ON lg.lease_id = l.id AND lg.active "
                    "WHERE l.pool_id = %s", [pool_id])
        cur.fetchall()


if __name__ == "__main__":
    main()
