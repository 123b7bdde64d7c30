"""The production stack for end-to-end benchmarks: a fresh PostgreSQL database, a configuration,
and web + scheduler worker + worker + beat as real processes started with the same commands as
`scripts/run.sh` (stacktools.processes, shared with the tests), against the machine's PostgreSQL and Redis.

Also: CPU seconds of a set of processes (from /proc), to charge the server for what it spent.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from stacktools.processes import REPO, Proc, answers, beat_command, web_command, worker_command
from stacktools.processes import running as stack_running
from stacktools.ready import free_port


def processes(port: int, env: dict[str, str], logs: Path) -> dict[str, Proc]:
    """The processes of scripts/run.sh (web, scheduler, worker, beat), logging under `logs`."""
    level = os.environ.get("BENCH_LOGLEVEL", "WARNING")
    url = f"http://127.0.0.1:{port}/healthz"
    commands = {
        "web": (web_command(port, 2, "--log-level", "warning"), answers(url)),
        # As scripts/run.sh: its processes pass different pools at once (allocation/engine/handoff.py).
        "scheduler": (worker_command("scheduler", "gpupool.schedule",
                                     int(env.get("GPUPOOL_SCHEDULER_PROCESSES", "2")), level,
                                     "--prefetch-multiplier", "1"), None),
        "worker": (worker_command("gpupool", "gpupool", 1, level), None),
        "beat": (beat_command("WARNING"), None),
    }
    return {name: Proc(name, argv, env, logs / f"{name}.log", *([ready] if ready else []))
            for name, (argv, ready) in commands.items()}


def _admin_connection(url: str) -> Any:
    import psycopg2

    # libpq reads the URL itself (one server, or an HA cluster's several): only the database differs.
    conn = psycopg2.connect(url, dbname="postgres", connect_timeout=5)
    conn.autocommit = True
    return conn


def fresh_database(name: str) -> str:
    """Drop and create database `name` on the server of DATABASE_URL (default: local PostgreSQL);
    return its URL."""
    base = urlparse(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"))
    if not base.scheme.startswith("postgres"):
        sys.exit("this benchmark needs PostgreSQL: set DATABASE_URL=postgres://…")
    url = base._replace(path=f"/{name}").geturl()
    conn = _admin_connection(url)
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{name}"')
        cur.execute("SHOW autovacuum")
        if cur.fetchone()[0] != "on":  # this machine's server ships with it off; PostgreSQL's default is on
            print("note: this PostgreSQL server runs with autovacuum off: the tables every lease rewrites keep "
                  "their dead row versions for the whole run, so figures are worse than on a default server",
                  file=sys.stderr)
    conn.close()
    return url


def drop_database(url: str) -> None:
    conn = _admin_connection(url)
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{urlparse(url).path.lstrip("/")}" WITH (FORCE)')
    conn.close()


def environment(db_url: str, redis_db: int, **extra: str) -> dict[str, str]:
    var = tempfile.mkdtemp(prefix="gpupool-bench-")
    env = dict(os.environ)
    env.update(DATABASE_URL=db_url, REDIS_URL=f"redis://127.0.0.1:6379/{redis_db}", GPUPOOL_VAR_DIR=var,
               DJANGO_SETTINGS_MODULE="pool.settings", PYTHONUNBUFFERED="1", **extra)
    return env


def setup(env: dict[str, str], config_yaml: str) -> None:
    """Migrate, apply the configuration and discover the fleet (as an operator would)."""
    import redis

    redis.Redis.from_url(env["REDIS_URL"]).flushdb()
    manage = [sys.executable, str(REPO / "manage.py")]
    subprocess.run([*manage, "migrate", "-v", "0"], env=env, check=True, timeout=300)
    cfg = Path(env["GPUPOOL_VAR_DIR"]) / "bench.yaml"
    cfg.write_text(config_yaml)
    subprocess.run([*manage, "apply", "-f", str(cfg)], env=env, check=True, timeout=300, stdout=subprocess.DEVNULL)
    subprocess.run([*manage, "discover"], env=env, check=True, timeout=600, stdout=subprocess.DEVNULL)


def tokens(env: dict[str, str], usernames: list[str]) -> dict[str, str]:
    script = ("import sys\nfrom django.contrib.auth import get_user_model\n"
              "from core.tokens import token_issue\n"
              "for name in sys.argv[1:]:\n"
              "    user, _ = get_user_model().objects.get_or_create(username=name)\n"
              "    print(name, token_issue(user=user, name='bench'))\n")
    out = subprocess.run([sys.executable, "-c", "import django; django.setup()\n" + script, *usernames],
                         env=env, check=True, timeout=120, capture_output=True, text=True, cwd=REPO).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


@contextmanager
def running(env: dict[str, str], names: tuple[str, ...] = ("web", "scheduler", "worker", "beat")
            ) -> Iterator[tuple[str, dict[str, Proc]]]:
    """Start the named processes; yield (base URL, processes) once /healthz answers."""
    port = free_port()
    logs = Path(env["GPUPOOL_VAR_DIR"]) / "log"
    logs.mkdir(exist_ok=True)
    procs = {name: proc for name, proc in processes(port, env, logs).items() if name in names}
    with stack_running(list(procs.values()), timeout=60):
        time.sleep(2.0)  # workers connect to the broker (their readiness is not logged at WARNING)
        yield f"http://127.0.0.1:{port}", procs


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _cpu(fields: list[str]) -> float:
    """Own user + system time plus that of reaped children (exited workers, closed backends)."""
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / os.sysconf("SC_CLK_TCK")


def _processes() -> dict[int, tuple[int, list[str]]]:
    """Every process: pid → (parent pid, its /proc stat fields)."""
    parents = {}
    for proc in Path("/proc").glob("[0-9]*"):
        fields = _stat(int(proc.name))
        if fields is not None:
            parents[int(proc.name)] = (int(fields[1]), fields)
    return parents


def _tree_cpu(parents: dict[int, tuple[int, list[str]]], pids: list[int]) -> float:
    tree = set(pids)
    grew = True
    while grew:
        grew = False
        for pid, (ppid, _) in parents.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return sum(_cpu(parents[p][1]) for p in tree if p in parents)


def cpu_seconds(pids: list[int]) -> float:
    """CPU seconds spent so far by these processes and all their descendants."""
    return _tree_cpu(_processes(), pids)


def cpu_by_group(groups: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds spent so far by each named group of processes (and their descendants), and by
    PostgreSQL ("postgres": the postmaster and its backends), from one walk of /proc."""
    parents = _processes()
    spent = {name: _tree_cpu(parents, pids) for name, pids in groups.items()}
    spent["postgres"] = _tree_cpu(parents, [pid for pid, (ppid, _) in parents.items()
                                            if _is_postgres(pid) and not _is_postgres(ppid)])
    return spent


def backend_cpu(dbname: str) -> dict[int, float]:
    """CPU seconds of each PostgreSQL backend connected to `dbname` (its process title names it)."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            title = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if not title.startswith("postgres: ") or f" {dbname} " not in title:
                continue
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            out[int(proc.name)] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            continue
    return out


def comm(pid: int) -> str:
    """The process's command name ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _is_postgres(pid: int) -> bool:
    return comm(pid) in ("postgres", "postgresql")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
