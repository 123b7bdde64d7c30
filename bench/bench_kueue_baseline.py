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
processes (one per pool, asyncio), each following its teams' grants on the Server-Sent Events
stream (`leases/events/`), never polling. A preempted lease is asked for again, as Kueue requeues.

Prints wall time and its ratio to Kueue's 351 s, mean and p99 time to grant per class,
preemptions, API errors, and server CPU seconds per lease (gpupool's processes; PostgreSQL apart);
then the run's shape every 10 s (bench/run_shape.py): the machine's CPU busy, the capacity held,
the queues and the grants a second.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import subprocess
import sys
import time
from collections.abc import AsyncIterable, AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _stack, run_shape

KUEUE_WALL_S = 351.0
KUEUE_MEAN_WAIT_S = {"small": 215.5, "medium": 76.8, "large": 6.7}
CLASSES = {  # name: (count per team, creation interval s, run time s, priority class, GPUs)
    "small": (350, 0.1, 0.2, "p50", 1),
    "medium": (100, 0.5, 0.5, "p100", 5),
    "large": (50, 1.2, 1.0, "p200", 20),
}
POOLS, TEAMS = 5, 6


def team_name(pool: int, team: int) -> str:
    return f"c{pool}-q{team}"


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


# --- the client: one process per pool ------------------------------------------------------------
class PoolClient:
    def __init__(self, url: str, pool: int, tokens: dict[str, str], scale: float) -> None:
        self.url, self.pool, self.tokens, self.scale = url + "/api/v1/", pool, tokens, scale
        self.jobs: list[dict[str, Any]] = []
        self.by_lease: dict[str, dict[str, Any]] = {}
        self.early: dict[str, str] = {}  # lease id → state seen on the stream before the POST answered
        self.last_event: dict[str, str] = {}  # team → id of the last event its stream sent
        self.errors: dict[str, int] = {}
        self.requests = 0
        self.done = asyncio.Event()
        self.remaining = 0

    def _error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1

    async def run(self) -> dict[str, Any]:
        import aiohttp

        # Idle connections are dropped before the server's keep-alive (5 s) would close them.
        connector = aiohttp.TCPConnector(limit=64, keepalive_timeout=3)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as http:
            self.http = http
            ready = [asyncio.Event() for _ in range(TEAMS)]
            streams = [asyncio.create_task(self.follow(team_name(self.pool, t), ready[t])) for t in range(TEAMS)]
            await asyncio.gather(*(r.wait() for r in ready))
            self.started = time.monotonic()
            gens = [asyncio.create_task(self.generate(team_name(self.pool, t), cls))
                    for t in range(TEAMS) for cls in CLASSES]
            self.remaining = sum(max(1, int(CLASSES[c][0] * self.scale)) for c in CLASSES) * TEAMS
            await asyncio.gather(*gens)
            await self.done.wait()
            self.finished = time.monotonic()
            for task in streams:
                task.cancel()
        return {"jobs": [{k: j[k] for k in ("class", "submit", "grant", "end", "preempted")} for j in self.jobs],
                "errors": self.errors, "requests": self.requests,
                "wall_s": self.finished - self.started}

    async def call(self, method: str, path: str, team: str, body: Any = None, key: str = "") -> dict[str, Any] | None:
        headers = {"Authorization": f"Token {self.tokens[team]}"}
        if key:
            headers["Idempotency-Key"] = key  # a retried POST returns the same lease
        for attempt in range(5):
            try:
                async with self.http.request(method, self.url + path, json=body, headers=headers) as r:
                    self.requests += 1
                    if r.status >= 400:
                        self._error(f"HTTP {r.status}")
                        if r.status >= 500 or r.status == 429:
                            await asyncio.sleep(0.2 * 2 ** attempt)
                            continue
                        return None
                    return await r.json()
            except Exception as exc:  # connection trouble: count it, back off, try again
                self._error(type(exc).__name__)
                await asyncio.sleep(0.2 * 2 ** attempt)
        return None

    async def generate(self, team: str, cls: str) -> None:
        count, interval = CLASSES[cls][:2]
        count = max(1, int(count * self.scale))
        for k in range(count):
            await asyncio.sleep(max(0.0, self.started + k * interval - time.monotonic()))
            job = {"team": team, "class": cls, "n": k, "submit": time.monotonic(), "grant": None, "end": None,
                   "preempted": 0}
            self.jobs.append(job)
            await self.submit(job)

    async def submit(self, job: dict[str, Any]) -> None:
        _, _, _, priority, gpus = CLASSES[job["class"]]
        job["attempt"] = job.get("attempt", 0) + 1
        lease = await self.call("POST", "leases/", job["team"], {
            "pool": f"cohort-{self.pool}", "gpus": gpus, "team": job["team"], "priority_class": priority,
            "same_host": False, "ttl_seconds": 600}, key=f"{job['team']}-{job['class']}-{job['n']}-{job['attempt']}")
        if lease is None:
            self.finish(job)
            return
        job["current"], job["held"] = lease["id"], False
        self.by_lease[lease["id"]] = job
        await self.on_state(lease["id"], self.early.pop(lease["id"], lease["state"]))

    async def on_state(self, lease_id: str, state: str) -> None:
        """The stream renders each change with the lease as it is now: a grant may first show as
        `preempted` if it was preempted before the event was rendered."""
        job = self.by_lease.get(lease_id)
        if job is None:
            self.early[lease_id] = state
            return
        if job.get("current") != lease_id or job["end"] is not None:
            return
        if state == "granted" and not job["held"]:
            job["held"] = True
            job["grant"] = job["grant"] or time.monotonic()
            asyncio.get_running_loop().create_task(self.hold_and_release(job, lease_id))
        elif state == "preempted":
            job["preempted"] += 1
            job["current"] = None
            await self.submit(job)  # Kueue requeues a preempted workload

    async def hold_and_release(self, job: dict[str, Any], lease_id: str) -> None:
        await asyncio.sleep(CLASSES[job["class"]][2])
        if job.get("current") != lease_id:
            return  # preempted meanwhile
        answer = await self.call("POST", f"leases/{lease_id}/release/", job["team"], {})
        if answer is not None and answer["state"] == "preempted":
            return  # the preemption event resubmits it
        self.finish(job)

    def finish(self, job: dict[str, Any]) -> None:
        if job["end"] is None:
            job["end"] = time.monotonic()
            self.remaining -= 1
            if self.remaining <= 0:
                self.done.set()

    async def reconcile(self, team: str) -> None:
        """Like a Kubernetes client after a 410: read the state of every lease still waited on."""
        await asyncio.sleep(0.5)  # after the new stream's bookmark
        for lease_id, job in list(self.by_lease.items()):
            if job["team"] == team and job.get("current") == lease_id and job["end"] is None and not job["held"]:
                lease = await self.call("GET", f"leases/{lease_id}/", team)
                if lease is not None:
                    await self.on_state(lease_id, lease["state"])

    async def follow(self, team: str, ready: asyncio.Event) -> None:
        """Follow the team's lease events until cancelled, connecting again whenever the stream
        ends or fails. `ready` is set at the first bookmark (the stream is watching)."""
        while True:
            try:
                await self._watch(team, ready)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._error(f"stream {type(exc).__name__}")
                await asyncio.sleep(0.5)

    async def _watch(self, team: str, ready: asyncio.Event) -> None:
        """One connection to the team's event stream, resumed after the last event seen; returns
        when the stream ends or is refused."""
        headers = {"Authorization": f"Token {self.tokens[team]}"}
        if self.last_event.get(team):
            headers["Last-Event-ID"] = self.last_event[team]
        async with self.http.get(self.url + f"leases/events/?team={team}", headers=headers) as r:
            if r.status == 410:  # changes were lost: watch afresh, then re-read what we wait on
                self.last_event[team] = ""
                asyncio.get_running_loop().create_task(self.reconcile(team))
                return
            if r.status != 200:
                self._error(f"stream HTTP {r.status}")
                await asyncio.sleep(1)
                return
            async for event in _sse_events(r.content):
                if event.get("id"):
                    self.last_event[team] = event["id"]
                if event.get("event") == "bookmark":
                    ready.set()
                elif event.get("event") == "lease":
                    lease = json.loads(event["data"])
                    await self.on_state(lease["id"], lease["state"])


async def _sse_events(lines: AsyncIterable[bytes]) -> AsyncIterator[dict[str, str]]:
    """The Server-Sent Events of a stream, each as its fields (`id`, `event`, `data`)."""
    event: dict[str, str] = {}
    async for raw in lines:
        line = raw.decode().rstrip("\n")
        if line:
            key, _, value = line.partition(": ")
            event[key] = value
            continue
        yield event
        event = {}


def client_main(args: argparse.Namespace) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    tokens = json.loads(args.tokens)
    result = asyncio.run(PoolClient(args.url, args.pool, tokens, args.scale).run())
    Path(args.out).write_text(json.dumps(result))


# --- the driver ------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the 15,000 leases (1.0: all)")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--pool", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--tokens", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        client_main(args)
        return

    db = _stack.fresh_database("gpupool_bench_kueue")
    env = _stack.environment(db, redis_db=12, GPUPOOL_AUTOSCHEDULE="1", GPUPOOL_LEASE_RATE="10000000/min")
    t0 = time.monotonic()
    _stack.setup(env, config())
    users = [f"u-{team_name(p, t)}" for p in range(POOLS) for t in range(TEAMS)]
    tokens = _stack.tokens(env, users)
    print(f"setup: {POOLS} pools × 120 GPUs, {POOLS * TEAMS} teams, in {time.monotonic() - t0:.1f} s")
    out_dir = Path(env["GPUPOOL_VAR_DIR"])
    with _stack.running(env) as (url, procs):
        pids = [p.pid for p in procs.values()]
        cpu0, pg0 = _stack.cpu_seconds(pids), _stack.postgres_cpu_seconds()
        each0 = {name: _stack.cpu_seconds([p.pid]) for name, p in procs.items()}
        client_pids: list[int] = []
        sampler = run_shape.CpuSampler(groups=lambda: _stack.cpu_by_group({
            "web": [procs["web"].pid], "scheduler": [procs["scheduler"].pid], "clients": client_pids}))
        sampler.start()
        started = time.monotonic()
        clients = [subprocess.Popen([sys.executable, __file__, "--client", "--url", url, "--pool", str(p),
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
        cpu, pg = _stack.cpu_seconds(pids) - cpu0, _stack.postgres_cpu_seconds() - pg0
        each = {name: _stack.cpu_seconds([p.pid]) - each0[name] for name, p in procs.items()}
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
