"""REST API throughput and latency against the real server, PostgreSQL + Redis, with `wrk` as the load.

    python bench/bench_api.py [--seconds 8] [--repeat 3] [--connections 32] [--rate 150] [--hosts 2000]

What it does, bounded in time and on loopback only:
  1. creates a fresh database (`--db`, default gpupool_bench_api_wt) on DATABASE_URL's server,
     migrates it, applies a config with a simulated fleet of hosts × 8 GPUs (16,000 by default) and
     discovers it once;
  2. starts the server the way production does (stacktools.processes.web_command: the ASGI front, as in
     docker-compose.yml) with GPUPOOL_AUTOSCHEDULE=0 (it measures the API, not scheduling passes)
     and a lease rate limit high enough not to throttle the load (GPUPOOL_LEASE_RATE);
  3. closed-loop phases with wrk (a C load generator in its own process, see bench/wrk_api.lua):
     GET /healthz (the baseline: one DB round trip, no auth, no ORM), POST leases/ + POST
     leases/{id}/release/ round trips (by a team without a GPU-hour budget, then by one with a
     budget, whose requests pay the budget check), GET leases/{id}/, GET leases/?limit=100, GET gpus/?limit=100,
     GET pools/;
  4. open-loop phases at a fixed rate (bench/pace.py, its own asyncio process): /healthz and lease
     round trips at `--rate` requests per second, for latency at a given load;
  5. each phase `--repeat` times, reporting the median; then one client alone (no queueing), and
     SQL queries per request counted in-process with CaptureQueriesContext;
then prints req/s, p50/p99 latency and each figure as a ratio of the /healthz baseline of the same
run, with the CPU the load generator and the server used, stops the server and drops the database.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _stack
from stacktools.processes import Proc, answers, web_command
from stacktools.ready import free_port

# The server under test (Server below) is started as production starts it (docker-compose.yml, `web`):
# the ASGI front (uvicorn workers under gunicorn), the API on GPUPOOL_WEB_THREADS request threads.

REPO = Path(__file__).resolve().parent.parent
LUA = Path(__file__).resolve().parent / "wrk_api.lua"
LEASE_BODY = '{"pool": "bench", "gpus": 1}'


def _config(hosts: int, users: int) -> str:
    names = ", ".join(f"bench{i}" for i in range(users))
    capped = ", ".join(f"capped{i}" for i in range(users))
    # Team `capped` has a GPU-hour budget that never runs out: its lease requests pay the budget
    # check (one indexed query) and are measured beside those of `bench`, which has none.
    return f"""
pools:
  - {{name: bench, description: "benchmark fleet"}}
teams:
  - {{name: bench, members: [{names}]}}
  - {{name: capped, members: [{capped}]}}
quotas:
  - {{team: bench, pool: bench, guaranteed: 0, limit: null}}
  - {{team: capped, pool: bench, guaranteed: 0, limit: null}}
priority_classes:
  - {{name: default, value: 0}}
sources:
  - {{name: sim, kind: simulated, pool: bench, hosts: {hosts}, gpus_per_host: 8}}
budgets:
  - {{team: capped, gpu_hours: 1000000000, period: month, action: block_new}}
"""


def _setup(hosts: int, users: int, env: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
    """Migrate, apply and discover (subprocesses, like an operator would). Returns the users'
    tokens, one pending lease per user (for the read phase), and the tokens of team `capped`."""
    manage = [sys.executable, str(REPO / "manage.py")]
    started = time.perf_counter()
    subprocess.run([*manage, "migrate", "-v", "0"], env=env, check=True, timeout=300)
    cfg = Path(env["GPUPOOL_VAR_DIR"]) / "bench.yaml"
    cfg.write_text(_config(hosts, users))
    subprocess.run([*manage, "apply", "-f", str(cfg)], env=env, check=True, timeout=300, stdout=subprocess.DEVNULL)
    subprocess.run([*manage, "discover"], env=env, check=True, timeout=600, stdout=subprocess.DEVNULL)
    from django.contrib.auth import get_user_model
    from django.db import connection

    from allocation.services.leases import lease_create
    from core.tokens import token_issue
    from inventory.models import Pool

    # What autovacuum would do shortly after a large discovery: planner statistics for 16,000 rows.
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    print(f"setup: migrate + apply + discover of {hosts * 8:,} GPUs in {time.perf_counter() - started:.1f} s")
    pool = Pool.objects.get(name="bench")
    users_ = list(get_user_model().objects.filter(username__startswith="bench").order_by("username"))[:users]
    tokens = [token_issue(user=u, name="bench") for u in users_]
    leases = [str(lease_create(user=u, pool=pool, gpus=1)[0].pk) for u in users_]
    capped = list(get_user_model().objects.filter(username__startswith="capped").order_by("username"))[:users]
    return tokens, leases, [token_issue(user=u, name="bench") for u in capped]


def _cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of a process and its children, from /proc (0 where unreadable)."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    for p in [pid, *map(int, children)]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return total


class Server:
    def __init__(self, env: dict[str, str], workers: int) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        argv = web_command(self.port, workers, "--keep-alive", "30", "--log-level", "warning")
        log = Path(env["GPUPOOL_VAR_DIR"]) / "server.log"
        self.proc = Proc("the server", argv, env, log, answers(f"{self.base}/healthz"))
        try:
            self.proc.start(timeout=60)
        except RuntimeError as exc:
            self.stop()
            raise SystemExit(str(exc)) from None

    def cpu(self) -> float:
        return _cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        self.proc.stop()


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _measured(server: Server, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one phase; add the CPU the load generator (a child process) and the server used."""
    client0, server0, t0 = _children_cpu(), server.cpu(), time.monotonic()
    out = run()
    wall = max(time.monotonic() - t0, 1e-9)
    out["client_cpu"] = (_children_cpu() - client0) / wall
    out["server_cpu"] = (server.cpu() - server0) / wall
    return out


def _wrk(server: Server, args: argparse.Namespace, env: dict[str, str], **bench_env: str) -> dict[str, Any]:
    cmd = ["wrk", "-t", str(args.threads), "-c", str(args.connections), "-d", f"{max(1, round(args.seconds))}s",
           "--timeout", "10s", "-s", str(LUA), server.base]
    done = subprocess.run(cmd, env={**env, **bench_env}, capture_output=True, text=True,
                          timeout=args.seconds + 60, check=False)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("BENCH_JSON ")), None)
    if line is None:
        raise SystemExit(f"wrk gave no figures:\n{done.stdout}\n{done.stderr}")
    raw = json.loads(line.removeprefix("BENCH_JSON "))
    seconds = raw["duration_us"] / 1e6
    return {"rate": raw["requests"] / seconds, "p50": raw["p50_us"] / 1000, "p99": raw["p99_us"] / 1000,
            "errors": raw["failed"] + raw["socket_errors"] + raw["timeouts"], "requests": raw["requests"]}


def _pace(server: Server, args: argparse.Namespace, tokens: list[str], mode: str, path: str) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve().parent / "pace.py"), "--base", server.base,
           "--tokens", ",".join(tokens), "--mode", mode, "--path", path, "--rate", str(args.rate),
           "--seconds", str(args.paced_seconds), "--body", LEASE_BODY]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.paced_seconds + 120, check=False)
    if done.returncode != 0:
        raise SystemExit(f"pace.py failed:\n{done.stderr}")
    raw = json.loads(done.stdout)
    return {"rate": raw["rate"], "p50": raw["p50_ms"], "p99": raw["p99_ms"],
            "errors": sum(raw["failures"].values()), "requests": raw["requests"]}


def _sequential(base: str, token: str, lease_id: str, capped_token: str, n: int = 30) -> dict[str, float]:
    """Median latency of one client alone: the cost of a request without queueing."""
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token}"

    def median(call: Callable[[], Any]) -> float:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            call()
            times.append((time.perf_counter() - t0) * 1000)
        return statistics.median(times)

    def round_trip(token: str = token) -> None:
        headers = {"Content-Type": "application/json", "Authorization": f"Token {token}"}
        lease = session.post(f"{base}/api/v1/leases/", data=LEASE_BODY, timeout=30, headers=headers).json()
        session.post(f"{base}/api/v1/leases/{lease['id']}/release/", json={}, timeout=30, headers=headers)

    out = {"GET /healthz": median(lambda: session.get(f"{base}/healthz", timeout=30)),
           "POST leases/ + release/": median(round_trip),
           "the same, team with a budget": median(lambda: round_trip(capped_token)),
           "GET leases/{id}/": median(lambda: session.get(f"{base}/api/v1/leases/{lease_id}/", timeout=30)),
           "GET gpus/?limit=100": median(lambda: session.get(f"{base}/api/v1/gpus/?limit=100", timeout=30))}
    session.close()
    return out


def _query_counts(token: str, capped_token: str) -> dict[str, int]:
    """SQL queries per request, in-process through the same views (Django test client)."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_AUTHORIZATION=f"Token {token}")
    client.get("/api/v1/pools/")  # warm per-process caches (content types, throttle) first
    counts: dict[str, int] = {}

    def count(name: str, call: Callable[[], Any]) -> Any:
        with CaptureQueriesContext(connection) as ctx:
            response = call()
        assert response.status_code < 400, (name, response.status_code, response.content[:200])
        counts[name] = len(ctx.captured_queries)
        return response

    created = count("POST leases/", lambda: client.post("/api/v1/leases/", LEASE_BODY,
                                                         content_type="application/json"))
    lease_id = created.json()["id"]
    capped = Client(HTTP_AUTHORIZATION=f"Token {capped_token}")
    capped.get("/api/v1/pools/")
    count("POST leases/ (team with a budget)", lambda: capped.post("/api/v1/leases/", LEASE_BODY,
                                                                   content_type="application/json"))
    count("GET leases/{id}/", lambda: client.get(f"/api/v1/leases/{lease_id}/"))
    count("POST leases/{id}/release/", lambda: client.post(f"/api/v1/leases/{lease_id}/release/", {},
                                                            content_type="application/json"))
    for url in ("/api/v1/leases/?limit=100", "/api/v1/gpus/?limit=100", "/api/v1/pools/", "/api/v1/quotas/",
                "/api/v1/hosts/?limit=100"):
        count(f"GET {url.removeprefix('/api/v1/')}", functools.partial(client.get, url))
    count("GET /healthz", lambda: client.get("/healthz"))
    return counts


def _phases(server: Server, args: argparse.Namespace, env: dict[str, str], tokens: list[str],
            leases: list[str], capped: list[str]) -> dict[str, dict[str, Any]]:
    """One pass over every phase; names map to {rate, p50, p99, errors, requests, client_cpu, server_cpu}."""
    wrk_env = {"BENCH_TOKENS": ",".join(tokens[:args.threads]), "BENCH_LEASES": ",".join(leases[:args.threads]),
               "BENCH_BODY": LEASE_BODY}

    def get(*paths: str) -> Callable[[], dict[str, Any]]:
        return lambda: _wrk(server, args, env, **wrk_env, BENCH_MODE="get", BENCH_PATHS="|".join(paths))

    plan: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("GET /healthz", get("/healthz")),
        ("POST leases/ + release/", lambda: _wrk(server, args, env, **wrk_env, BENCH_MODE="lease")),
        ("  the same, with a budget", lambda: _wrk(server, args, env, **{
            **wrk_env, "BENCH_TOKENS": ",".join(capped[:args.threads])}, BENCH_MODE="lease")),
        ("GET leases/{id}/", get("/api/v1/leases/{lease}/")),
        ("GET leases/?limit=100", get("/api/v1/leases/?limit=100")),
        ("GET gpus/?limit=100", get(*(f"/api/v1/gpus/?limit=100&offset={i * 1000}" for i in range(16)))),
        ("GET pools/", get("/api/v1/pools/")),
        (f"paced /healthz @{args.rate:g}/s", lambda: _pace(server, args, tokens, "get", "/healthz")),
        (f"paced leases @{args.rate:g}/s", lambda: _pace(server, args, tokens, "lease", "")),
    ]
    out = {}
    for name, run in plan:
        out[name] = _measured(server, run)
        time.sleep(1)  # let the server's queues drain between phases
    return out


def _report(runs: list[dict[str, dict[str, Any]]], args: argparse.Namespace, solo: dict[str, float],
            counts: dict[str, int], load: tuple[float, float]) -> None:
    def med(name: str, key: str) -> float:
        return statistics.median(run[name][key] for run in runs)

    names = list(runs[0])
    base, paced_base = "GET /healthz", names[-2]
    print(f"\nserver: {' '.join(web_command(0)[2:8])} ({args.workers} workers), "
          f"PostgreSQL + Redis, {os.cpu_count()} cores shared with the load generator; {args.hosts * 8:,} GPUs")
    print(f"closed loop: wrk {args.threads} threads × {args.connections} connections, {args.seconds:g} s a phase; "
          f"paced: {args.rate:g} req/s for {args.paced_seconds:g} s; medians of {len(runs)} runs")
    print(f"{'phase':<28}{'req/s':>8}{'p50 ms':>8}{'p99 ms':>8}{'req/s ×hz':>10}{'p50 ×hz':>9}{'p99 ×hz':>9}"
          f"{'errors':>7}{'client cpu':>11}{'server cpu':>11}")
    for name in names:
        ref = paced_base if name.startswith("paced") else base
        rate, p50, p99 = med(name, "rate"), med(name, "p50"), med(name, "p99")
        errors = sum(run[name]["errors"] for run in runs)
        print(f"{name:<28}{rate:>8.0f}{p50:>8.1f}{p99:>8.1f}{rate / med(ref, 'rate'):>10.3f}"
              f"{p50 / med(ref, 'p50'):>9.1f}{p99 / med(ref, 'p99'):>9.1f}{errors:>7}"
              f"{med(name, 'client_cpu'):>10.0%}{med(name, 'server_cpu'):>10.0%}")
    lease = "POST leases/ + release/"
    print(f"lease round trips (create + release): {med(lease, 'rate') / 2:.0f}/s; each run: "
          + ", ".join(f"{run[lease]['rate']:.0f}" for run in runs) + " req/s")
    print("one client alone (median ms): " + ", ".join(f"{k} {v:.1f}" for k, v in solo.items()))
    print(f"load average (1 min): {load[0]:.1f} before, {load[1]:.1f} after, on {os.cpu_count()} cores "
          "(above the core count: other work shared the CPUs)")
    print("SQL queries per request: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    print(json.dumps({"medians": {n: {k: round(med(n, k), 3) for k in ("rate", "p50", "p99", "client_cpu",
                                                                       "server_cpu")} for n in names},
                      "sequential_ms": {k: round(v, 2) for k, v in solo.items()}, "queries": counts}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each closed-loop phase")
    parser.add_argument("--paced-seconds", type=float, default=10.0, help="length of each fixed-rate phase")
    parser.add_argument("--repeat", type=int, default=3, help="runs of every phase; medians are reported")
    parser.add_argument("--threads", type=int, default=2, help="wrk threads (one user each)")
    parser.add_argument("--connections", type=int, default=32, help="wrk connections in all")
    parser.add_argument("--rate", type=float, default=150.0, help="requests per second of the paced phases")
    parser.add_argument("--hosts", type=int, default=2000, help="simulated hosts (8 GPUs each)")
    parser.add_argument("--users", type=int, default=8, help="API users (tokens) of the bench team")
    parser.add_argument("--workers", type=int, default=3, help="server worker processes (docker-compose: 3)")
    parser.add_argument("--db", default="gpupool_bench_api", help="database created and dropped by the bench")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("bench_api needs wrk (the HTTP load generator): apt-get install wrk")

    db_url = _stack.fresh_database(args.db)
    var_dir = tempfile.mkdtemp(prefix="gpupool-bench-api-")
    env = {**os.environ, "DATABASE_URL": db_url, "GPUPOOL_AUTOSCHEDULE": "0", "GPUPOOL_VAR_DIR": var_dir,
           "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15"),
           "GPUPOOL_LEASE_RATE": "1000000/min", "DJANGO_SETTINGS_MODULE": "pool.settings",
           "SECRET_KEY": "bench-" + "x" * 40, "ALLOWED_HOSTS": "127.0.0.1,localhost,testserver",
           "LOG_LEVEL": "ERROR", "DEBUG": "0"}
    os.environ.update(env)
    sys.path.insert(0, str(REPO))
    import django

    django.setup()
    tokens, leases, capped = _setup(args.hosts, max(args.users, args.threads), env)
    from django.db import connections

    connections.close_all()
    server = Server(env, args.workers)
    try:
        # Warm every worker's DB connection, URL resolver and caches before measuring.
        _wrk(server, argparse.Namespace(**{**vars(args), "seconds": 2}), env, BENCH_TOKENS=",".join(tokens),
             BENCH_MODE="get", BENCH_PATHS="/api/v1/pools/")
        load_before = os.getloadavg()[0]
        runs = []
        for i in range(args.repeat):
            runs.append(_phases(server, args, env, tokens, leases, capped))
            print(f"run {i + 1}/{args.repeat}: " + ", ".join(f"{n} {r['rate']:.0f}/s p99 {r['p99']:.0f} ms"
                                                             for n, r in runs[-1].items()), flush=True)
        load_after = os.getloadavg()[0]
        solo = _sequential(server.base, tokens[0], leases[0], capped[0])
    finally:
        server.stop()
    counts = _query_counts(tokens[0], capped[0])
    connections.close_all()
    _stack.drop_database(db_url)
    _report(runs, args, solo, counts, (load_before, load_after))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
