"""Kueue's own baseline performance scenario, replayed through gpupool's real API.

    python bench/bench_kueue_baseline.py [--scale 1.0] [--timeout 900]

Kueue's scenario (test/performance/scheduler/configs/baseline in kubernetes-sigs/kueue): 5 cohorts
of 6 ClusterQueues, each with a nominal quota of 20 and a borrowing limit of 100; each queue submits
350 small workloads (1 unit, 200 ms, priority 50) one every 100 ms, 100 medium (5 units, 500 ms,
priority 100) one every 500 ms and 50 large (20 units, 1 s, priority 200) one every 1.2 s: 15,000
workloads. Kueue's recorded figures: 351 s wall, mean time to admission 215 s small, 77 s medium,
6.7 s large.

Here a cohort is a pool of 120 GPUs (15 simulated hosts × 8), a ClusterQueue a team with
`guaranteed: 20, limit: 120`, a workload a lease (`same_host: false`: Kueue's quota has no
topology) held for its run time then released. The stack is the production one (web on
pool.asgi, scheduler worker, worker, beat) on PostgreSQL + Redis; the clients are 5 separate
processes (bench/kueue_client.py, one per pool, asyncio), each following its teams' grants on the
Server-Sent Events stream (`leases/events/`), never polling. A preempted lease is asked for
again, as Kueue requeues.

Prints wall time and its ratio to Kueue's 351 s, mean and p99 time to grant per class,
preemptions, API errors, and server CPU seconds per lease (gpupool's processes; PostgreSQL apart);
then the run's shape every 10 s (bench/run_shape.py): the machine's CPU busy, the capacity held,
the queues and the grants a second.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _stack, run_shape
from bench.kueue_client import CLASSES, POOLS, TEAMS, team_name

CLIENT = Path(__file__).resolve().with_name("kueue_client.py")

KUEUE_WALL_S = 351.0
KUEUE_MEAN_WAIT_S = {"small": 215.5, "medium": 76.8, "large": 6.7}


def config() -> str:
    pools = "\n".join(f"  - {{name: cohort-{p}}}" for p in range(POOLS))
    teams = "\n".join(f"  - {{name: {team_name(p, t)}, members: [u-{team_name(p, t)}]}}"
                      for p in range(POOLS) for t in range(TEAMS))
    quotas = "\n".join(f"  - {{team: {team_name(p, t)}, pool: cohort-{p}, guaranteed: 20, limit: 120}}"
                       for p in range(POOLS) for t in range(TEAMS))
    sources = "\n".join(f"  - {{name: sim-{p}, kind: simulated, pool: cohort-{p}, hosts: 15, gpus_per_host: 8,"
                        f" interval_s: 3600}}" for p in range(POOLS))
    return f"""pools:
{pools}
teams:
{teams}
quotas:
{quotas}
priority_classes:
  - {{name: default, value: 0}}
  - {{name: p50, value: 50, preemptible: true, min_runtime_s: 0, grace_s: 0}}
  - {{name: p100, value: 100, preemptible: true, min_runtime_s: 0, grace_s: 0}}
  - {{name: p200, value: 200, preemptible: true, min_runtime_s: 0, grace_s: 0}}
scheduler: {{fair_share_half_life_hours: 168, pass_interval_s: 5}}
sources:
{sources}
"""


# --- the driver ------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the 15,000 leases (1.0: all)")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()

    db = _stack.fresh_database("gpupool_bench_kueue")
    env = _stack.environment(db, redis_db=12, GPUPOOL_AUTOSCHEDULE="1", GPUPOOL_LEASE_RATE="10000000/min")
    t0 = time.monotonic()
    _stack.setup(env, config())
    users = [f"u-{team_name(p, t)}" for p in range(POOLS) for t in range(TEAMS)]
    tokens = _stack.tokens(env, users)
    print(f"setup: {POOLS} pools × 120 GPUs, {POOLS * TEAMS} teams, in {time.monotonic() - t0:.1f} s")
    out_dir = Path(env["GPUPOOL_VAR_DIR"])
    with _stack.running(env) as (url, procs):
        groups = {name: [p.pid] for name, p in procs.items()}
        spent0 = _stack.cpu_by_group(groups)
        client_pids: list[int] = []
        sampler = run_shape.CpuSampler(groups=lambda: _stack.cpu_by_group({
            "web": [procs["web"].pid], "scheduler": [procs["scheduler"].pid], "clients": client_pids}))
        sampler.start()
        started = time.monotonic()
        clients = [subprocess.Popen([sys.executable, str(CLIENT), "--url", url, "--pool", str(p),
                                     "--scale", str(args.scale), "--out", str(out_dir / f"client-{p}.json"),
                                     "--tokens", json.dumps({team_name(p, t): tokens[f"u-{team_name(p, t)}"]
                                                             for t in range(TEAMS)})])
                   for p in range(POOLS)]
        client_pids.extend(client.pid for client in clients)
        children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        for client in clients:
            try:
                client.wait(timeout=max(1.0, args.timeout - (time.monotonic() - started)))
            except subprocess.TimeoutExpired:
                client.kill()
        wall = time.monotonic() - started
        sampler.stop()
        children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the clients are the only children reaped
        clients_cpu = (children.ru_utime + children.ru_stime) - (children0.ru_utime + children0.ru_stime)
        spent = _stack.cpu_by_group(groups)
        each = {name: spent[name] - spent0[name] for name in procs}
        cpu, pg = sum(each.values()), spent["postgres"] - spent0["postgres"]
        check, occupancy = _ledger_check(env)
    print("server CPU by process: " + ", ".join(f"{name} {secs:.1f} s" for name, secs in each.items())
          + f"; the load generator (5 client processes) {clients_cpu:.1f} s")
    report([json.loads((out_dir / f"client-{p}.json").read_text()) for p in range(POOLS)
            if (out_dir / f"client-{p}.json").exists()], wall, cpu, pg, check, args.scale, occupancy)
    run_shape.print_timeline(env["DATABASE_URL"], sampler.samples, capacity_gpus=POOLS * 120,
                             group_samples=sampler.group_samples)


def _ledger_check(env: dict[str, str]) -> tuple[dict[str, int], dict[str, Any]]:
    import psycopg2

    conn = psycopg2.connect(env["DATABASE_URL"])
    with conn.cursor() as cur:
        cur.execute("SELECT state, count(*) FROM allocation_lease GROUP BY state")
        states = dict(cur.fetchall())
        cur.execute("SELECT count(*) FROM allocation_leasegpu WHERE active")
        row = cur.fetchone()
        assert row is not None  # count(*) answers one row
        states["active GPU links"] = row[0]
        # Where the GPU-seconds went: held by a lease (granted → ended) against the work the
        # clients did in them, per class (told apart by size), and the pools' capacity over the span.
        cur.execute("SELECT gpu_count, count(*), sum(gpu_count * extract(epoch FROM ended_at - granted_at))"
                    " FROM allocation_lease WHERE granted_at IS NOT NULL AND ended_at IS NOT NULL GROUP BY gpu_count")
        by_gpus = {gpus: (n, float(held)) for gpus, n, held in cur.fetchall()}
        cur.execute("SELECT extract(epoch FROM max(ended_at) - min(granted_at)) FROM allocation_lease")
        span = cur.fetchone()
    conn.close()
    return states, {"by_gpus": by_gpus, "span_s": float(span[0] or 0) if span else 0.0}


def _print_occupancy(occupancy: dict[str, Any] | None, scale: float) -> None:
    """GPU-seconds held by leases against the work done in them and the pools' capacity: the wall
    is long either because GPUs sit free while leases wait (passes too slow) or because a lease
    holds its GPUs longer than its run (the grant reaching the client, the release reaching the
    server)."""
    if not occupancy or not occupancy["by_gpus"]:
        return
    run_s = {c[4]: c[2] for c in CLASSES.values()}  # GPUs → run time
    capacity = POOLS * 120 * occupancy["span_s"]
    held_total = sum(held for _, held in occupancy["by_gpus"].values())
    work = sum(CLASSES[c][0] * scale * TEAMS * POOLS * CLASSES[c][2] * CLASSES[c][4] for c in CLASSES)
    print(f"GPU-seconds: capacity {capacity:,.0f} over the {occupancy['span_s']:.1f} s span; held by leases "
          f"{held_total:,.0f} ({held_total / max(capacity, 1):.0%}); work {work:,.0f} ({work / max(capacity, 1):.0%})")
    for gpus, (n, held) in sorted(occupancy["by_gpus"].items()):
        extra = held / gpus / n - run_s.get(gpus, 0.0)
        print(f"  {gpus:2d}-GPU leases: {n:,} held {held / gpus / n:.2f} s on average "
              f"({extra:.2f} s beyond their run: grant to client + release to server)")


def report(results: list[dict[str, Any]], wall: float, cpu: float, pg: float, states: dict[str, int],
           scale: float = 1.0, occupancy: dict[str, Any] | None = None) -> None:
    jobs = [j for r in results for j in r["jobs"]]
    errors: dict[str, int] = {}
    for r in results:
        for k, v in r["errors"].items():
            errors[k] = errors.get(k, 0) + v
    requests = sum(r["requests"] for r in results)
    finished = [j for j in jobs if j["grant"] is not None and j["end"] is not None]
    print(f"leases: {len(jobs):,} submitted, {len(finished):,} granted and released; lease rows by state: {states}")
    print(f"wall: {wall:.1f} s = {wall / KUEUE_WALL_S:.2f}× Kueue's {KUEUE_WALL_S:.0f} s "
          f"(clients' own spans: {max((r['wall_s'] for r in results), default=0):.1f} s)")
    means: dict[str, float] = {}
    for cls in CLASSES:
        waits = [j["grant"] - j["submit"] for j in finished if j["class"] == cls]
        if waits:
            mean = means[cls] = sum(waits) / len(waits)
            print(f"  time to grant {cls:6s}: mean {mean:7.2f} s, p99 {_stack.percentile(waits, 0.99):7.2f} s "
                  f"(Kueue mean {KUEUE_MEAN_WAIT_S[cls]:.1f} s: {mean / KUEUE_MEAN_WAIT_S[cls]:.3f}×)  n={len(waits)}")
    _print_occupancy(occupancy, scale)
    print(f"preemptions (leases asked again): {sum(j['preempted'] for j in jobs):,}")
    print(f"API requests: {requests:,}; API errors: {sum(errors.values())} {errors or ''}")
    n = max(1, len(finished))
    print(f"server CPU: gpupool {cpu:.1f} s ({cpu / n * 1000:.1f} ms per lease), PostgreSQL {pg:.1f} s "
          f"({pg / n * 1000:.1f} ms per lease), on {wall:.0f} s × {os.cpu_count()} cores")
    ok = wall <= 90 and means.get("large", math.inf) <= 13 and len(finished) == len(jobs) and not errors
    print(f"goal (≤ 90 s, large leases granted in ≤ 13 s on average, every lease granted and released, "
          f"0 API errors): {('met' if ok else 'MISSED') if scale == 1.0 else 'judged at --scale 1 only'}; "
          f"CPU per lease (≤ 4 ms gpupool, ≤ 3 ms PostgreSQL): "
          f"{'met' if cpu / n <= 0.004 and pg / n <= 0.003 else 'MISSED'}")


if __name__ == "__main__":
    main()
