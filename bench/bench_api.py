"""REST API throughput and latency against the real server: gunicorn on PostgreSQL + Redis.

    python bench/bench_api.py [--seconds 10] [--clients 50] [--hosts 2000]

What it does, bounded in time and on loopback only:
  1. creates a fresh database `gpupool_bench` (from DATABASE_URL's server), migrates it, applies a
     config with a simulated fleet of hosts × 8 GPUs (16,000 by default) and discovers it once;
  2. starts gunicorn on a free 127.0.0.1 port with GPUPOOL_AUTOSCHEDULE=0 (REDIS_URL → cache);
  3. baseline: GET /healthz from N client threads (one DB round trip, no auth, no ORM);
  4. POST leases/ + POST leases/{id}/release/ round trips from N threads, one user each;
  5. GET gpus/?limit=100 over the whole fleet from N threads;
  6. SQL queries per request, counted in-process with CaptureQueriesContext;
then prints req/s, p50/p99 latency and each figure as a ratio of the /healthz baseline, stops
gunicorn and drops the database.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import requests

REPO = Path(__file__).resolve().parent.parent
DB_NAME = "gpupool_bench"
PASSWORD = "bench"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _fresh_database() -> str:
    """Drop and create `gpupool_bench` on the server of DATABASE_URL; return its URL."""
    import psycopg2

    base = urlparse(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpupool"))
    if not base.scheme.startswith("postgres"):
        sys.exit("bench_api needs PostgreSQL: set DATABASE_URL=postgres://…")
    conn = psycopg2.connect(host=base.hostname or "127.0.0.1", port=base.port or 5432,
                            user=base.username or "postgres", password=base.password, dbname="postgres",
                            connect_timeout=5)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{DB_NAME}"')
    conn.close()
    return base._replace(path=f"/{DB_NAME}").geturl()


def _drop_database(url: str) -> None:
    import psycopg2

    base = urlparse(url)
    conn = psycopg2.connect(host=base.hostname, port=base.port or 5432, user=base.username or "postgres",
                            password=base.password, dbname="postgres", connect_timeout=5)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
    conn.close()


def _config(hosts: int, clients: int) -> str:
    users = ", ".join(f"bench{i}" for i in range(clients))
    return f"""
pools:
  - {{name: bench, description: "benchmark fleet"}}
teams:
  - {{name: bench, members: [{users}]}}
quotas:
  - {{team: bench, pool: bench, guaranteed: 0, limit: null}}
priority_classes:
  - {{name: default, value: 0}}
sources:
  - {{name: sim, kind: simulated, pool: bench, hosts: {hosts}, gpus_per_host: 8}}
"""


def _setup(hosts: int, clients: int, env: dict[str, str]) -> list[str]:
    """Migrate, apply and discover (subprocesses, like an operator would); return the users' tokens."""
    manage = [sys.executable, str(REPO / "manage.py")]
    started = time.perf_counter()
    subprocess.run([*manage, "migrate", "-v", "0"], env=env, check=True, timeout=300)
    cfg = Path(env["GPUPOOL_VAR_DIR"]) / "bench.yaml"
    cfg.write_text(_config(hosts, clients))
    subprocess.run([*manage, "apply", "-f", str(cfg)], env=env, check=True, timeout=300, stdout=subprocess.DEVNULL)
    subprocess.run([*manage, "discover"], env=env, check=True, timeout=600, stdout=subprocess.DEVNULL)
    # What autovacuum would do shortly after a large discovery: planner statistics for 16,000 rows.
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    print(f"setup: migrate + apply + discover of {hosts * 8:,} GPUs in {time.perf_counter() - started:.1f} s")
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    users = get_user_model().objects.filter(username__startswith="bench").order_by("username")
    return [Token.objects.get_or_create(user=u)[0].key for u in users][:clients]


class Phase:
    """N threads, each with its own keep-alive session, repeat `step` until the deadline."""

    def __init__(self, name: str, clients: int, seconds: float) -> None:
        self.name, self.clients, self.seconds = name, clients, seconds
        self.latencies: list[float] = []
        self.errors: dict[str, int] = {}
        self.requests = 0
        self.lock = threading.Lock()

    def run(self, step: Callable[[requests.Session, int, Callable[[requests.Response, float], None]], None],
            tokens: list[str] | None = None) -> Phase:
        deadline = time.monotonic() + self.seconds

        def record(response: requests.Response, seconds: float) -> None:
            with self.lock:
                self.requests += 1
                self.latencies.append(seconds)
                if response.status_code >= 400:
                    key = f"{response.status_code}"
                    self.errors[key] = self.errors.get(key, 0) + 1

        def worker(i: int) -> None:
            session = requests.Session()
            if tokens:
                session.headers["Authorization"] = f"Token {tokens[i % len(tokens)]}"
            while time.monotonic() < deadline:
                try:
                    step(session, i, record)
                except requests.RequestException as exc:
                    with self.lock:
                        self.errors[type(exc).__name__] = self.errors.get(type(exc).__name__, 0) + 1
            session.close()

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(self.clients)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=self.seconds + 60)
        self.elapsed = time.monotonic() - started
        return self

    @property
    def rate(self) -> float:
        return self.requests / self.elapsed if self.elapsed else 0.0

    def pct(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def _timed(session: requests.Session, method: str, url: str, record: Callable[..., None], **kw: Any) -> Any:
    t0 = time.perf_counter()
    response = session.request(method, url, timeout=30, **kw)
    record(response, time.perf_counter() - t0)
    return response


def _sequential(base: str, token: str, n: int = 20) -> dict[str, float]:
    """Median latency of one client alone: the cost of a request without queueing."""
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token}"
    out: dict[str, float] = {}

    def median(call: Callable[[], Any]) -> float:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            call()
            times.append((time.perf_counter() - t0) * 1000)
        return sorted(times)[len(times) // 2]

    out["GET /healthz"] = median(lambda: session.get(f"{base}/healthz", timeout=30))
    out["GET gpus/?limit=100"] = median(lambda: session.get(f"{base}/api/v1/gpus/?limit=100", timeout=30))

    def round_trip() -> None:
        lease = session.post(f"{base}/api/v1/leases/", json={"pool": "bench", "gpus": 1}, timeout=30).json()
        session.post(f"{base}/api/v1/leases/{lease['id']}/release/", json={}, timeout=30)

    out["POST leases/ + release/"] = median(round_trip)
    session.close()
    return out


def _query_counts(tokens: list[str]) -> dict[str, int]:
    """SQL queries per request, in-process through the same views (Django test client)."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_AUTHORIZATION=f"Token {tokens[0]}")
    client.get("/api/v1/pools/")  # warm per-process caches (content types, throttle) first
    counts: dict[str, int] = {}

    def count(name: str, call: Callable[[], Any]) -> Any:
        with CaptureQueriesContext(connection) as ctx:
            response = call()
        assert response.status_code < 400, (name, response.status_code, response.content[:200])
        counts[name] = len(ctx.captured_queries)
        return response

    created = count("POST leases/", lambda: client.post("/api/v1/leases/", {"pool": "bench", "gpus": 1},
                                                         content_type="application/json"))
    lease_id = created.json()["id"]
    count("POST leases/{id}/release/", lambda: client.post(f"/api/v1/leases/{lease_id}/release/", {},
                                                            content_type="application/json"))
    for url in ("/api/v1/gpus/?limit=100", "/api/v1/leases/?limit=100", "/api/v1/pools/", "/api/v1/quotas/",
                "/api/v1/hosts/?limit=100"):
        count(f"GET {url.removeprefix('/api/v1/')}", lambda url=url: client.get(url))
    count("GET /healthz", lambda: client.get("/healthz"))
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each measured phase")
    parser.add_argument("--clients", type=int, default=50, help="concurrent client threads")
    parser.add_argument("--hosts", type=int, default=2000, help="simulated hosts (8 GPUs each)")
    parser.add_argument("--workers", type=int, default=(os.cpu_count() or 2) * 2 + 1, help="gunicorn workers")
    args = parser.parse_args()

    db_url = _fresh_database()
    var_dir = tempfile.mkdtemp(prefix="gpupool-bench-api-")
    env = {**os.environ, "DATABASE_URL": db_url, "GPUPOOL_AUTOSCHEDULE": "0", "GPUPOOL_VAR_DIR": var_dir,
           "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15"),
           "DJANGO_SETTINGS_MODULE": "pool.settings", "SECRET_KEY": "bench-" + "x" * 40,
           "ALLOWED_HOSTS": "127.0.0.1,localhost,testserver", "LOG_LEVEL": "ERROR", "DEBUG": "0"}
    os.environ.update(env)
    sys.path.insert(0, str(REPO))
    import django

    django.setup()
    tokens = _setup(args.hosts, args.clients, env)

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "pool.wsgi:application", "-b", f"127.0.0.1:{port}",
         "-w", str(args.workers), "-k", "gthread", "--threads", "4", "--keep-alive", "30",
         "--log-level", "warning"],
        cwd=REPO, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("gunicorn did not become healthy within 60 s")
            time.sleep(0.3)
        # Warm every worker's DB connection and URL resolver before measuring.
        Phase("warm", args.clients, 2).run(lambda s, i, rec: _timed(s, "GET", f"{base}/api/v1/pools/", rec), tokens)
        solo = _sequential(base, tokens[0])
        load_before = os.getloadavg()[0]

        health = Phase("GET /healthz", args.clients, args.seconds / 2).run(
            lambda s, i, rec: _timed(s, "GET", f"{base}/healthz", rec))

        def round_trip(session: requests.Session, i: int, rec: Callable[..., None]) -> None:
            created = _timed(session, "POST", f"{base}/api/v1/leases/", rec, json={"pool": "bench", "gpus": 1})
            if created.status_code == 201:
                _timed(session, "POST", f"{base}/api/v1/leases/{created.json()['id']}/release/", rec, json={})

        leases = Phase("POST leases/ + release/", args.clients, args.seconds).run(round_trip, tokens)
        gpus = Phase("GET gpus/?limit=100", args.clients, args.seconds).run(
            lambda s, i, rec: _timed(s, "GET", f"{base}/api/v1/gpus/?limit=100&offset={(i * 100) % 16000}", rec),
            tokens)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)

    load_after = os.getloadavg()[0]
    counts = _query_counts(tokens)
    from django.db import connections

    connections.close_all()
    _drop_database(db_url)

    print(f"\nserver: gunicorn {args.workers} workers × 4 threads on 127.0.0.1, PostgreSQL + Redis, "
          f"{os.cpu_count()} cores (shared with the {args.clients} client threads); {args.hosts * 8:,} GPUs")
    print(f"{'phase':<26}{'requests':>9}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'× healthz':>11}  errors")
    for phase in (health, leases, gpus):
        ratio = phase.rate / health.rate if health.rate else float("nan")
        print(f"{phase.name:<26}{phase.requests:>9}{phase.rate:>9.0f}{phase.pct(0.5):>9.1f}{phase.pct(0.99):>9.1f}"
              f"{ratio:>11.2f}  {phase.errors or '-'}")
    print(f"round trips (create + release): {leases.rate / 2:.0f}/s")
    print("one client, sequential (no queueing): " + ", ".join(f"{k} {v:.1f} ms" for k, v in solo.items()))
    print(f"machine load average (1 min): {load_before:.1f} before, {load_after:.1f} after the measured phases "
          f"on {os.cpu_count()} cores: figures above ~{os.cpu_count()} mean other work shared the CPUs")
    print("SQL queries per request: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    print(json.dumps({"healthz_rps": round(health.rate), "lease_rps": round(leases.rate),
                      "lease_p50_ms": round(leases.pct(0.5), 1), "lease_p99_ms": round(leases.pct(0.99), 1),
                      "gpus_rps": round(gpus.rate), "gpus_p50_ms": round(gpus.pct(0.5), 1),
                      "gpus_p99_ms": round(gpus.pct(0.99), 1), "sequential_ms": solo, "queries": counts,
                      "load_avg": [round(load_before, 1), round(load_after, 1)]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
