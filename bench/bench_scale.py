"""Passes that scale out, and the engine on one very large pool.

    python bench/bench_scale.py scale-out [--pools 50] [--hosts 250] [--rounds 6] [--leases 10] [--redis-db 10]
    python bench/bench_scale.py engine [--hosts 8000] [--pending 40000] [--profile DIR]

scale-out: `--pools` pools of `--hosts` × 8 simulated GPUs (50 × 2,000 by default) on PostgreSQL +
Redis, half of each pool held by running leases of 4 GPUs. The scheduler is a real Celery worker on
the schedule queue (`worker -c N -Q gpupool.schedule`, as scripts/run.sh starts it), with 1 then
2 processes, then 1 and 2 again (the held GPUs grow a little from phase to phase; the two phases of
each count are averaged). Each round adds `--leases` pending 1-GPU leases to every pool, asks for
each pool's pass as a lease create does (allocation.triggers.request_pass), and waits until every
one is granted. Prints passes and leases granted per second for each phase, the ratio of 2
processes to 1, and the machine's load average (other work on the machine moves the figures).

engine: one pool of `--hosts` × 8 GPUs (64,000 by default), every GPU held (one lease per host),
then `--pending` pending leases of 1-8 GPUs from 8 teams: the fair policy's passes over them, each
with its wall time and SQL queries (CaptureQueriesContext), then, in passes of their own, the
peak of Python memory allocated during a pass (tracemalloc, which slows the pass it traces) and the
process's peak RSS: the first pass (writes every
explanation), a pass with nothing changed, and a pass after one host is freed (grants there,
every request behind moves). Baseline in the same run: the pure policy alone on the snapshot.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import os
import resource
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _stack


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="what", required=True)
    out = sub.add_parser("scale-out")
    out.add_argument("--pools", type=int, default=50)
    out.add_argument("--hosts", type=int, default=250, help="hosts of 8 GPUs per pool")
    out.add_argument("--rounds", type=int, default=6, help="rounds per phase")
    out.add_argument("--leases", type=int, default=10, help="pending leases per pool per round")
    out.add_argument("--redis-db", type=int, default=10)
    out.add_argument("--keep", action="store_true", help="keep the database afterwards")
    eng = sub.add_parser("engine")
    eng.add_argument("--hosts", type=int, default=8000)
    eng.add_argument("--pending", type=int, default=40000)
    eng.add_argument("--repeat", type=int, default=3)
    eng.add_argument("--profile", default="", help="directory for cProfile dumps of the passes")
    eng.add_argument("--reuse", action="store_true",
                     help="measure again on the fleet an earlier run left (its setup takes minutes)")
    args = parser.parse_args()
    if args.what == "scale-out":
        scale_out(args)
    else:
        engine(args)


# --- scale-out ------------------------------------------------------------------------------------
def _config(pools: int, hosts: int) -> str:
    names = "\n".join(f"  - {{name: p{i}}}" for i in range(pools))
    sources = "\n".join(f"  - {{name: s{i}, kind: simulated, pool: p{i}, hosts: {hosts}, gpus_per_host: 8,"
                        f" interval_s: 86400}}" for i in range(pools))
    return f"""pools:
{names}
teams: [{{name: a}}, {{name: b}}, {{name: c}}, {{name: d}}]
priority_classes: [{{name: default, value: 0}}]
scheduler: {{pass_interval_s: 3600}}
sources:
{sources}
"""


def _django(env: dict[str, str]) -> None:
    os.environ.update(env)
    import django

    django.setup()


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def scale_out(args: Any) -> None:
    from stacktools.processes import Proc, worker_command
    from stacktools.processes import running as stack_running

    db_url = _stack.fresh_database("gpupool_bench_scale")
    env = _stack.environment(db_url, args.redis_db, GPUPOOL_AUTOSCHEDULE="1")
    t0 = time.monotonic()
    _stack.setup(env, _config(args.pools, args.hosts))
    _django(env)
    from django.contrib.auth import get_user_model
    from django.db import connection

    from allocation.engine import run_pass
    from allocation.models import Lease, PriorityClass, Team
    from allocation.triggers import request_pass
    from inventory.models import Gpu, Pool
    from pool.celery import app

    pools = list(Pool.objects.order_by("pk"))
    user = get_user_model().objects.create(username="bench")
    teams = list(Team.objects.order_by("name"))
    default = PriorityClass.objects.get(name="default")

    def add(pool: Any, n: int, gpus: int) -> list[Any]:
        return Lease.objects.bulk_create([Lease(team=teams[i % len(teams)], user=user, pool=pool,
                                                priority_class=default, gpu_count=gpus, ttl_seconds=86400)
                                          for i in range(n)])

    for pool in pools:  # half of each pool held, by leases of 4
        add(pool, args.hosts, 4)
        run_pass([pool.pk])
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    print(f"{args.pools} pools × {args.hosts * 8} GPUs = {Gpu.objects.count()} GPUs, "
          f"{Lease.objects.filter(state='granted').count()} running leases; set up in {time.monotonic() - t0:.0f} s")
    app.control.purge()
    logs = Path(env["GPUPOOL_VAR_DIR"]) / "log"
    logs.mkdir(exist_ok=True)
    results: dict[int, list[tuple[float, int, int]]] = {1: [], 2: []}
    try:
        for procs in (1, 2, 1, 2):
            argv = worker_command(f"sched{procs}-{time.monotonic_ns()}", "gpupool.schedule", procs, "WARNING",
                                  "--prefetch-multiplier", "1", "--without-heartbeat")
            proc = Proc(f"scheduler ×{procs}", argv, env, logs / f"scheduler-{procs}.log")
            with stack_running([proc], timeout=60):
                time.sleep(3.0)  # the processes connect to the broker (not logged at WARNING)
                one = next(iter(pools))
                warm = add(one, 1, 1)  # one round trip through the workers before timing
                request_pass(one.pk)
                _wait_granted([warm[0].pk])
                load_before = _load()
                seconds, granted = 0.0, 0
                spent = _Spent(proc.pid, urlparse(db_url).path.lstrip("/"))
                for _ in range(args.rounds):
                    ids = [lease.pk for pool in pools for lease in add(pool, args.leases, 1)]
                    started = time.perf_counter()
                    spent.resume()
                    for pool in pools:
                        request_pass(pool.pk)
                    _wait_granted(ids)
                    spent.pause()
                    seconds += time.perf_counter() - started
                    granted += len(ids)
                passes = args.rounds * len(pools)
                results[procs].append((seconds, passes, granted))
                print(f"{procs} scheduler process(es): {passes} passes, {granted} leases granted "
                      f"in {seconds:6.2f} s: {passes / seconds:6.1f} passes/s, "
                      f"{granted / seconds:7.1f} leases/s  ({load_before} before, {_load()} after)")
                print("    " + spent.report(seconds, passes))
    finally:
        app.control.purge()
        if not args.keep:
            connection.close()
            _stack.drop_database(db_url)
    rate = {n: statistics.mean(passes / s for s, passes, _ in runs) for n, runs in results.items()}
    print(f"passes/s: 1 process {rate[1]:.1f}, 2 processes {rate[2]:.1f}: {rate[2] / rate[1]:.2f}× "
          f"(target ≥ 1.8×; {os.cpu_count()} CPUs, {_load()})")


class _Spent:
    """CPU seconds of the timed stretches of a phase, by who spent them: the scheduler's Celery
    parent (it takes messages from Redis and hands them to its children), its children (the
    passes), PostgreSQL, Redis, this driver (its request_pass calls and its polls), and the whole
    machine's busy fraction. The 2-to-1 ratio can reach 2× only where one process leaves the
    machine at most half busy: whatever is spent off the pass's own path lowers that ceiling."""

    def __init__(self, scheduler: int, dbname: str) -> None:
        self.scheduler, self.dbname = scheduler, dbname
        self.total: dict[str, float] = {}
        self._at: dict[str, float] = {}
        self._backends: dict[int, float] = {}

    def _now(self) -> dict[str, float]:
        from bench.run_shape import _cpu_times

        parents = _stack._processes()
        tree = _stack._tree_cpu(parents, [self.scheduler])
        own = _stack._cpu(parents[self.scheduler][1]) if self.scheduler in parents else 0.0
        redis = [pid for pid, (_, fields) in parents.items() if _stack.comm(pid) == "redis-server"]
        busy, all_ = _cpu_times()
        times = os.times()
        return {"celery parent": own, "passes": tree - own,
                "redis": sum(_stack._cpu(parents[pid][1]) for pid in redis),
                "driver": times.user + times.system,
                "busy": busy / os.sysconf("SC_CLK_TCK"), "all": all_ / os.sysconf("SC_CLK_TCK")}

    def resume(self) -> None:
        self._at, self._backends = self._now(), _stack.backend_cpu(self.dbname)

    def pause(self) -> None:
        now, backends = self._now(), _stack.backend_cpu(self.dbname)
        for key, value in now.items():
            self.total[key] = self.total.get(key, 0.0) + value - self._at[key]
        # The backends of this database only (another database's work on the server left out); a
        # backend that ended meanwhile took its time with it.
        self.total["postgres"] = self.total.get("postgres", 0.0) + sum(
            spent - self._backends.get(pid, 0.0) for pid, spent in backends.items())

    def report(self, seconds: float, passes: int) -> str:
        t = self.total
        parts = ", ".join(f"{key} {1000 * t[key] / passes:.1f}"
                          for key in ("passes", "celery parent", "postgres", "redis", "driver"))
        return (f"CPU a pass (ms): {parts}; machine busy {100 * t['busy'] / max(1e-9, t['all']):.0f}% "
                f"({os.cpu_count()} CPUs)")


def _wait_granted(ids: list[Any], timeout: float = 600.0) -> None:
    """Until every lease of `ids` is granted. The poll asks whether any lease still waits, which
    the state index answers from its first entry, not whether each of `ids` is granted (a key
    lookup each: ~6 ms of PostgreSQL CPU a pass at 20 ms polls, charged to the phase); every
    pending lease here is the driver's own. Then one check that they were granted, not ended."""
    from allocation.models import Lease

    deadline = time.monotonic() + timeout
    while Lease.objects.filter(state="pending").exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"leases not granted after {timeout:.0f} s")
        time.sleep(0.02)
    missed = Lease.objects.filter(pk__in=ids).exclude(state="granted").count()
    if missed:
        raise SystemExit(f"{missed} of {len(ids)} leases left the queue without a grant")


# --- engine ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class Measured:
    seconds: float
    queries: int
    writes: int
    py_peak_mb: float
    report: Any


def engine(args: Any) -> None:
    from bench import _django as bench_django
    from bench.bench_engine import EngineBench, _forget, _writes

    vendor = bench_django.setup("gpupool_bench_scale_engine", fresh=not args.reuse)
    ns = argparse.Namespace(hosts=args.hosts, gpus_per_host=8, repeat=args.repeat, profile=args.profile, sql=False)
    t0 = time.monotonic()
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from allocation.engine import run_pass

    if args.reuse:
        bench = _existing(ns, vendor, EngineBench)
    else:
        bench = EngineBench.on_new_fleet(ns, vendor)
        bench.add([8] * args.hosts, bench.round_robin(args.hosts))  # every GPU held, one lease per host
        run_pass([bench.pool.pk])
        sizes = [bench.rng.choice([1, 1, 1, 2, 2, 4, 8]) for _ in range(args.pending)]
        bench.add(sizes, [bench.rng.choice(bench.teams) for _ in sizes])
    bench.analyze()
    print(f"fleet: {args.hosts} hosts × 8 = {bench.capacity} GPUs on {vendor}, all held; {bench.counts()} "
          f"(set up in {time.monotonic() - t0:.0f} s)")
    policy_s = bench.policy_alone()
    print(f"baseline (policy alone on that snapshot, median of {args.repeat}): {policy_s * 1000:7.1f} ms")

    def measured(label: str, *, memory: bool = False) -> Measured:
        """One pass timed; with `memory`, under tracemalloc instead (which slows an allocating
        pass 1.2-2x: the figures of such a pass are its memory, not its time)."""
        profiler = cProfile.Profile() if args.profile and not memory else None
        if memory:
            tracemalloc.start()
        with CaptureQueriesContext(connection) as q:
            if profiler:
                profiler.enable()
            started, cpu = time.perf_counter(), time.process_time()
            report = run_pass([bench.pool.pk])[0]
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
            if profiler:
                profiler.disable()
                Path(args.profile).mkdir(parents=True, exist_ok=True)
                profiler.dump_stats(str(Path(args.profile) / f"scale-{label}.prof"))
        peak = tracemalloc.get_traced_memory()[1] if memory else 0
        tracemalloc.stop()
        sqls = [query["sql"] for query in q.captured_queries]
        m = Measured(seconds, len(sqls), _writes(sqls), peak / 2**20, report)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        if memory:
            print(f"{label:<34} Python peak {m.py_peak_mb:6.1f} MiB during the pass, process peak RSS {rss:6.0f} MiB")
        else:
            print(f"{label:<34} {m.seconds * 1000:8.1f} ms ({m.seconds / policy_s:4.1f}× policy; this process's "
                  f"CPU {cpu * 1000:8.1f} ms)  {m.queries:3d} queries ({m.writes} writes)  "
                  f"granted {len(report.granted):4d}, pending {report.pending}")
        return m

    _forget()
    first = measured("first pass (cold, every explanation)")
    idle = [measured(f"no-change pass {i + 1}") for i in range(args.repeat)]
    bench.free_one_host()
    churn = measured("one host freed")
    print("memory (separate passes under tracemalloc):")
    _forget()
    measured("cold pass", memory=True)
    measured("no-change pass", memory=True)
    worst = max([first.queries, churn.queries, *(m.queries for m in idle)])
    idle_s = statistics.median(m.seconds for m in idle)
    print(f"goals: a fair pass ≤ 2 s: churn {churn.seconds:.2f} s, no-change {idle_s:.2f} s, "
          f"first {first.seconds:.2f} s; "
          f"≤ 30 queries: at most {worst}")


def _existing(ns: Any, vendor: str, cls: Any) -> Any:
    """The EngineBench of the fleet an earlier run left in the database."""
    from django.contrib.auth import get_user_model

    from allocation.models import PriorityClass, Team
    from allocation.policy import get_policy
    from inventory.models import Pool

    teams = {t.name: t for t in Team.objects.all()}
    return cls(args=ns, vendor=vendor, pool=Pool.objects.get(name="bench"),
               user=get_user_model().objects.get(username="bench"), teams=sorted(teams), team_rows=teams,
               priority_class=PriorityClass.objects.get(name="default"), policy=get_policy("fair"))


if __name__ == "__main__":
    main()
