"""Server CPU per lease request: the hot lease path (allocation/api/fast/) against the generic DRF
path (`GPUPOOL_LEASE_FAST_PATH=0`, the baseline; `inline`: also without the web processes' outbox
relay thread, `GPUPOOL_OUTBOX_RELAY_THREAD=0`), in the same run, through the web server that
`make run` starts (pool/gunicorn_conf.py), with `wrk` as the load.

    python bench/bench_lease_path.py [--seconds 6] [--repeat 2] [--rate 500] [--profile bench/profiles]

What it does, on loopback only:
  1. a fresh database (`--db`, dropped at the end) on DATABASE_URL's server: one pool of simulated
     GPUs, a team of `--users` users with a token each and one pending lease each (to read and renew);
  2. for each path, its order alternating run by run (`--repeat`), the web server alone (no
     scheduler: it measures the requests, not the passes), warmed for 2 s, then closed-loop wrk
     phases: POST leases/ + POST leases/{id}/release/ round trips, GET leases/{id}/,
     POST leases/{id}/renew/; and one open-loop phase (bench/pace.py) of lease round trips at
     `--rate` requests per second, for p99 at that load;
  3. the CPU the web server spent (its processes, from /proc) and the PostgreSQL backends of the
     bench's database spent, divided by the requests served: milliseconds of CPU per request;
  4. with `--profile DIR`, py-spy records every web worker during the first run's round-trip and
     read phases (DIR/{path}-{phase}-{worker}.svg, flame graphs).

Prints, per path and phase, req/s, p50/p99, web and PostgreSQL CPU per request, each as a ratio of
the generic path's figure in the same run, with the load average around every phase (the machine
may be shared: compare ratios, not absolute figures, across runs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _stack
from stacktools.processes import Proc, answers, web_command
from stacktools.ready import free_port

HERE = Path(__file__).resolve().parent
LUA = HERE / "wrk_api.lua"
LEASE_BODY = '{"pool": "bench", "gpus": 1}'
# The web server's settings of each path measured: `inline` is the generic path as it was before
# the web processes' outbox relay thread (each request publishing its lease event after its commit).
PATHS = {"inline": {"GPUPOOL_LEASE_FAST_PATH": "0", "GPUPOOL_OUTBOX_RELAY_THREAD": "0"},
         "generic": {"GPUPOOL_LEASE_FAST_PATH": "0", "GPUPOOL_OUTBOX_RELAY_THREAD": "1"},
         "fast": {"GPUPOOL_LEASE_FAST_PATH": "1", "GPUPOOL_OUTBOX_RELAY_THREAD": "1"}}

CONFIG = """
pools: [{{name: bench}}]
teams: [{{name: bench, members: [{members}]}}]
quotas: [{{team: bench, pool: bench, guaranteed: 0, limit: null}}]
priority_classes: [{{name: default, value: 0}}]
sources: [{{name: sim, kind: simulated, pool: bench, hosts: 20, gpus_per_host: 8}}]
"""


def _setup(env: dict[str, str], users: int) -> tuple[list[str], list[str]]:
    """Migrate, apply, discover; returns a token and one pending lease per user."""
    _stack.setup(env, CONFIG.format(members=", ".join(f"u{i}" for i in range(users))))
    from django.contrib.auth import get_user_model
    from django.db import connection

    from allocation.services.leases import lease_create
    from core.tokens import token_issue

    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    people = list(get_user_model().objects.filter(username__startswith="u").order_by("username"))[:users]
    tokens = [token_issue(user=u, name="bench") for u in people]
    leases = [str(lease_create(user=u, pool="bench", gpus=1)[0].pk) for u in people]
    return tokens, leases


def _worker_pids(master: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{master}/task/{master}/children").read_text().split()]
    except OSError:
        return []


class Server:
    """The web server of `make run` (stacktools.processes.web_command) on a free port."""

    def __init__(self, env: dict[str, str], workers: int, log: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = Proc("web", web_command(self.port, workers, "--log-level", "warning"), env, log,
                         answers(f"{self.base}/healthz"))
        self.proc.start(timeout=90)

    def cpu(self) -> float:
        return _stack.cpu_seconds([self.proc.pid])

    def stop(self) -> None:
        self.proc.stop()


def _wrk(server: Server, args: argparse.Namespace, seconds: float, **bench_env: str) -> dict[str, Any]:
    cmd = ["wrk", "-t", str(args.threads), "-c", str(args.connections), "-d", f"{max(1, round(seconds))}s",
           "--timeout", "10s", "-s", str(LUA), server.base]
    done = subprocess.run(cmd, env={**os.environ, **bench_env}, capture_output=True, text=True,
                          timeout=seconds + 60, check=False)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("BENCH_JSON ")), None)
    if line is None:
        raise SystemExit(f"wrk gave no figures:\n{done.stdout}\n{done.stderr}")
    raw = json.loads(line.removeprefix("BENCH_JSON "))
    return {"requests": raw["requests"], "wall": raw["duration_us"] / 1e6, "p50": raw["p50_us"] / 1000,
            "p99": raw["p99_us"] / 1000, "errors": raw["failed"] + raw["socket_errors"] + raw["timeouts"]}


def _pace(server: Server, args: argparse.Namespace, tokens: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, str(HERE / "pace.py"), "--base", server.base, "--tokens", ",".join(tokens),
           "--mode", "lease", "--rate", str(args.rate), "--seconds", str(args.paced_seconds), "--body", LEASE_BODY]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.paced_seconds + 120, check=False)
    if done.returncode != 0:  # it waited a minute past the end for answers: the server fell behind
        print(f"pace.py failed (the server did not keep up with {args.rate:g} req/s): "
              f"{done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return {"requests": 0, "wall": args.paced_seconds, "p50": float("nan"), "p99": float("nan"), "errors": 1}
    raw = json.loads(done.stdout)
    return {"requests": raw["requests"], "wall": raw["requests"] / max(raw["rate"], 1e-9), "p50": raw["p50_ms"],
            "p99": raw["p99_ms"], "errors": sum(raw["failures"].values())}


def _profiled(server: Server, out: Path | None, name: str, seconds: float) -> list[subprocess.Popen[bytes]]:
    """py-spy recording every worker of `server` for `seconds` (none without `out`)."""
    if out is None:
        return []
    out.mkdir(parents=True, exist_ok=True)
    return [subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))),
                              "--rate", "250", "--nonblocking", "--format", "flamegraph",
                              "-o", str(out / f"{name}-w{n}.svg")], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
            for n, pid in enumerate(_worker_pids(server.proc.pid))]


def _phase(server: Server, dbname: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one phase; add the web server's and the database's CPU per request and the load."""
    load0, web0, pg0 = os.getloadavg()[0], server.cpu(), _stack.backend_cpu(dbname)
    out = run()
    web1, pg1 = server.cpu(), _stack.backend_cpu(dbname)
    requests = max(out["requests"], 1)
    out["rate"] = out["requests"] / max(out["wall"], 1e-9)
    out["web_ms"] = (web1 - web0) / requests * 1000
    out["pg_ms"] = sum(t - pg0.get(pid, 0.0) for pid, t in pg1.items()) / requests * 1000
    out["load"] = (load0 + os.getloadavg()[0]) / 2
    return out


def _run_path(path: str, env: dict[str, str], args: argparse.Namespace, tokens: list[str], leases: list[str],
              dbname: str, profile: Path | None) -> dict[str, dict[str, Any]]:
    log = Path(env["GPUPOOL_VAR_DIR"]) / f"web-{path}.log"
    server = Server({**env, **PATHS[path]}, args.workers, log)
    wrk_env = {"BENCH_TOKENS": ",".join(tokens[:args.threads]), "BENCH_LEASES": ",".join(leases[:args.threads]),
               "BENCH_BODY": LEASE_BODY}
    phases: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("create+release", lambda: _wrk(server, args, args.seconds, **wrk_env, BENCH_MODE="lease")),
        ("read", lambda: _wrk(server, args, args.seconds, **wrk_env, BENCH_MODE="get",
                              BENCH_PATHS="/api/v1/leases/{lease}/")),
        ("renew", lambda: _wrk(server, args, args.seconds, **wrk_env, BENCH_MODE="post",
                               BENCH_PATHS="/api/v1/leases/{lease}/renew/")),
        (f"paced @{args.rate:g}/s", lambda: _pace(server, args, tokens)),
    ]
    out: dict[str, dict[str, Any]] = {}
    try:
        _wrk(server, args, 2, **wrk_env, BENCH_MODE="lease")  # warm: connections, caches, prepared statements
        for name, run in phases:
            if name.startswith("paced") and out["create+release"]["rate"] < args.rate * 0.8:
                # A rate the server cannot sustain only builds a queue until pace.py gives up.
                out[name] = {"requests": 0, "wall": 1.0, "p50": float("nan"), "p99": float("nan"), "errors": 0,
                             "rate": 0.0, "web_ms": float("nan"), "pg_ms": float("nan"), "load": os.getloadavg()[0],
                             "skipped": True}
                continue
            spies = _profiled(server, profile, f"{path}-{name.replace('+', '-')}", args.seconds) \
                if name in ("create+release", "read") else []
            out[name] = _phase(server, dbname, run)
            for spy in spies:
                spy.wait(timeout=60)
            time.sleep(0.5)
    finally:
        server.stop()
    return out


def _ratio(value: float, base: dict[str, float], key: str) -> str:
    return f"{value / base[key]:>6.2f}" if base.get(key) else f"{'':>6}"


def _report(runs: list[dict[str, dict[str, dict[str, Any]]]], args: argparse.Namespace) -> None:
    def ran(path: str, phase: str) -> list[dict[str, Any]]:
        """The runs of `phase` that were measured (a paced phase is skipped in a run too slow for it)."""
        return [run[path][phase] for run in runs if not run[path][phase].get("skipped")]

    def med(path: str, phase: str, key: str) -> float:
        measured = ran(path, phase)
        return statistics.median(m[key] for m in measured) if measured else float("nan")

    paths = [p for p in PATHS if p in runs[0]]
    phases = list(runs[0][paths[0]])
    print(f"\nweb: `make run`'s server ({' '.join(web_command(0, args.workers)[2:])}), PostgreSQL + Redis, "
          f"{os.cpu_count()} cores shared with wrk; medians of {len(runs)} runs; CPU per request = CPU "
          "seconds spent / requests served")
    print(f"ratios (×) are to the `{paths[0]}` path of the same run; load: the 1-minute load average")
    print(f"{'phase':<18}{'path':<9}{'req/s':>8}{'×':>6}{'p50 ms':>8}{'p99 ms':>8}{'web ms':>8}{'×':>6}"
          f"{'pg ms':>7}{'×':>6}{'errors':>7}{'load':>6}")
    for phase in phases:
        for path in paths:
            rate, web, pg = (med(path, phase, k) for k in ("rate", "web_ms", "pg_ms"))
            ref = paths[0]  # the first path named is the baseline
            base = {k: med(ref, phase, k) for k in ("rate", "web_ms", "pg_ms")}
            print(f"{phase:<18}{path:<9}{rate:>8.0f}{_ratio(rate, base, 'rate')}{med(path, phase, 'p50'):>8.1f}"
                  f"{med(path, phase, 'p99'):>8.1f}{web:>8.2f}{_ratio(web, base, 'web_ms')}{pg:>7.2f}"
                  f"{_ratio(pg, base, 'pg_ms')}"
                  f"{sum(r[path][phase]['errors'] for r in runs):>7}{med(path, phase, 'load'):>6.1f}"
                  + ("" if len(ran(path, phase)) == len(runs) else
                     f"  ({len(ran(path, phase))} of {len(runs)} runs: skipped where the closed-loop rate "
                     f"was under {args.rate * 0.8:g}/s)"))
    print(json.dumps({p: {ph: {k: round(med(p, ph, k), 3) for k in ("rate", "p50", "p99", "web_ms", "pg_ms", "load")}
                          for ph in phases} for p in paths}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="length of each closed-loop phase")
    parser.add_argument("--paced-seconds", type=float, default=10.0, help="length of the fixed-rate phase")
    parser.add_argument("--repeat", type=int, default=2, help="runs of every path; medians are reported")
    parser.add_argument("--threads", type=int, default=2, help="wrk threads (one user each)")
    parser.add_argument("--connections", type=int, default=16, help="wrk connections in all")
    parser.add_argument("--rate", type=float, default=500.0, help="requests per second of the paced phase")
    parser.add_argument("--users", type=int, default=8, help="API users (tokens)")
    parser.add_argument("--workers", type=int, default=2, help="web worker processes (make run: 2)")
    parser.add_argument("--paths", default="inline,generic,fast", help="which paths to measure, comma-separated")
    parser.add_argument("--profile", type=Path, default=None, help="py-spy flame graphs into this folder")
    parser.add_argument("--db", default="gpupool_bench_lease_path", help="database created and dropped")
    args = parser.parse_args()
    for tool in ("wrk", *(["py-spy"] if args.profile else [])):
        if shutil.which(tool) is None:
            sys.exit(f"bench_lease_path needs {tool}: apt-get install wrk; pip install py-spy")
    db_url = _stack.fresh_database(args.db)
    env = _stack.environment(db_url, int(os.environ.get("BENCH_REDIS_DB", "15")), GPUPOOL_AUTOSCHEDULE="0",
                             GPUPOOL_LEASE_RATE="1000000/min", SECRET_KEY="bench-" + "x" * 40,
                             ALLOWED_HOSTS="127.0.0.1,localhost,testserver", LOG_LEVEL="ERROR", DEBUG="0")
    os.environ.update(env)
    import django

    django.setup()
    tokens, leases = _setup(env, max(args.users, args.threads))
    from django.db import connections

    connections.close_all()
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    runs = []
    try:
        for i in range(args.repeat):
            run = {}
            for path in paths if i % 2 == 0 else paths[::-1]:
                run[path] = _run_path(path, env, args, tokens, leases, args.db, args.profile if i == 0 else None)
                print(f"run {i + 1}/{args.repeat} {path}: " + ", ".join(
                    f"{n} {r['rate']:.0f}/s web {r['web_ms']:.2f} ms/req" for n, r in run[path].items()), flush=True)
            runs.append(run)
    finally:
        connections.close_all()
        _stack.drop_database(db_url)
    _report(runs, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
