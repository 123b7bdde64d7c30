"""A Patroni cluster of the fault suite's own: one etcd and three Patroni members (PostgreSQL from
the distribution), on free loopback ports, in a temporary folder, for the HA scenarios.

It stands in for tests.faults.servers.PostgresServer in the fault Stack (`start`, `stop`, `remove`,
`create_database`, `url`, `log`), its `url` the libpq multi-host URL a deployment would give
gpupool (`target_session_attrs=read-write`: libpq finds the primary). The faults: `switchover`
(planned: patronictl moves the leader to the synchronous standby), `kill_primary` (a lost node:
kill -9 of the primary's Patroni and its postmaster's process group; the leader key then expires
in etcd after `TTL_S` and the synchronous standby is promoted), `rejoin` (the lost member's Patroni
started again: pg_rewind, then a replica). `primary()` and `members()` read the REST API.

Settings, and why:
- `synchronous_mode: true` with `synchronous_commit` on (PostgreSQL's default): a commit returns
  once the synchronous standby has its WAL, and Patroni promotes only that standby, so no commit a
  client saw acknowledged is lost in a failover. The scenario asserts exactly that.
- `fsync: off`: the faults here kill processes, never the machine; what PostgreSQL wrote is in the
  kernel's page cache and survives a kill -9, so turning fsync off loses nothing the scenarios can
  observe, while it spares a 2-core machine shared with other suites three clusters' worth of disk
  flushes. `full_page_writes` stays on: pg_rewind needs it. (On real machines fsync stays on.)
- `ttl: 10, loop_wait: 1, retry_timeout: 4` (Patroni's defaults: 30, 10, 10; loop_wait +
  2 × retry_timeout ≤ ttl): a failover within ~10 s, a switchover within ~2 s, yet a leader that
  misses a few loops on a busy machine keeps its key.
- `max_connections: 400` as the single-server stack has (web, workers, load, sampler).

Data is owned by the `postgres` user when the suite runs as root (PostgreSQL refuses root; see
tests.faults.servers). Every wait has a deadline; a missing binary is a pytest skip naming it
(tests.faults.patroni_tools says what this machine lacks).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import yaml

from stacktools.processes import children_of, command_line, is_alive
from stacktools.ready import free_port, wait_until
from tests.faults.patroni_tools import missing_reason, postgres_15_bin
from tests.faults.servers import _as_postgres

SCOPE = "gpupool-faults"
TTL_S, LOOP_WAIT_S, RETRY_TIMEOUT_S = 10, 1, 4
START_TIMEOUT_S = 90


@dataclass
class Member:
    name: str
    port: int  # PostgreSQL
    api: int  # Patroni's REST API
    root: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def config(self) -> Path:
        return self.root / "patroni.yml"

    @property
    def log(self) -> Path:
        return self.root / "patroni.log"

    def postmaster_pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int((self.data / "postmaster.pid").read_text().split()[0])
        return None


class PatroniCluster:
    """etcd + three Patroni members; the fault Stack's `pg` (see the module's docstring)."""

    def __init__(self, members: int = 3) -> None:
        reason = missing_reason()
        assert reason is None, reason
        self.bin = postgres_15_bin()
        self.root = Path(tempfile.mkdtemp(prefix="gpupool-faults-patroni-"))
        self.user = _as_postgres()
        self.log = self.root / "cluster.log"  # written by `stop`: etcd's and every member's log
        self.etcd_port, self.etcd_peer = free_port(), free_port()
        self.etcd: subprocess.Popen[bytes] | None = None
        self.started_s = 0.0  # how long `start` took
        self.synchronous = True  # synchronous_mode, as `configure` last set it
        self.members = [Member(f"pg{i}", free_port(), free_port(), self.root / f"pg{i}") for i in range(members)]
        for folder in (self.root, self.root / "etcd", *(m.root for m in self.members)):
            folder.mkdir(exist_ok=True)
            if self.user:
                os.chown(folder, *self.user)
        for member in self.members:
            member.config.write_text(yaml.safe_dump(self._config(member), sort_keys=False))

    # --- configuration -----------------------------------------------------------------------
    def _config(self, member: Member) -> dict[str, Any]:
        loopback = "127.0.0.1/32"
        return {
            "scope": SCOPE, "name": member.name,
            "log": {"level": "INFO", "format": f"%(asctime)s {member.name} %(levelname)s: %(message)s"},
            "restapi": {"listen": f"127.0.0.1:{member.api}", "connect_address": f"127.0.0.1:{member.api}"},
            "etcd3": {"hosts": [f"127.0.0.1:{self.etcd_port}"]},
            "bootstrap": {
                "dcs": {"ttl": TTL_S, "loop_wait": LOOP_WAIT_S, "retry_timeout": RETRY_TIMEOUT_S,
                        "maximum_lag_on_failover": 1 << 20, "synchronous_mode": True,
                        "postgresql": {"use_pg_rewind": True, "use_slots": True,
                                       "parameters": {"max_connections": 400, "max_wal_senders": 10,
                                                      "max_replication_slots": 10, "wal_keep_size": "256MB",
                                                      "hot_standby": "on", "wal_log_hints": "on"}}},
                "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{member.port}", "connect_address": f"127.0.0.1:{member.port}",
                "data_dir": str(member.data), "bin_dir": str(self.bin), "pgpass": str(member.root / "pgpass"),
                "authentication": {"superuser": {"username": "postgres"}, "replication": {"username": "postgres"},
                                   "rewind": {"username": "postgres"}},
                "pg_hba": ["local all all trust", f"host all all {loopback} trust",
                           f"host replication all {loopback} trust"],
                "parameters": {"unix_socket_directories": str(member.root), "fsync": "off",
                               "shared_buffers": "128MB", "log_min_messages": "warning",
                               "log_line_prefix": f"%m {member.name} [%p] "},
                "basebackup": [{"checkpoint": "fast"}, "no-sync"],
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
        }

    def url(self, dbname: str = "gpupool", **params: str) -> str:
        """The libpq multi-host URL of the cluster: every member, the primary found by libpq."""
        hosts = ",".join(f"127.0.0.1:{m.port}" for m in self.members)
        query = "&".join(f"{k}={v}" for k, v in {"target_session_attrs": "read-write", **params}.items())
        return f"postgres://postgres@{hosts}/{dbname}?{query}"

    # --- processes ---------------------------------------------------------------------------
    def _demote(self) -> None:
        if self.user:
            os.setgid(self.user[1])
            os.setuid(self.user[0])

    def _spawn(self, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PATRONI", "PG", "ETCD"))}
        env["HOME"] = str(self.root)
        with log.open("ab") as out:
            return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=self.root, env=env,
                                    preexec_fn=self._demote, start_new_session=True)

    def start(self, timeout: float = START_TIMEOUT_S) -> float:
        """etcd, then every member; returns the seconds until a primary with a streaming
        synchronous standby (and the other replica streaming) answers."""
        began = time.monotonic()
        self.etcd = self._spawn(
            ["etcd", "--name", "etcd0", "--data-dir", str(self.root / "etcd" / "data"),
             "--listen-client-urls", f"http://127.0.0.1:{self.etcd_port}",
             "--advertise-client-urls", f"http://127.0.0.1:{self.etcd_port}",
             "--listen-peer-urls", f"http://127.0.0.1:{self.etcd_peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.etcd_peer}",
             "--initial-cluster", f"etcd0=http://127.0.0.1:{self.etcd_peer}",
             "--initial-cluster-state", "new", "--initial-cluster-token", SCOPE, "--log-level", "warn"],
            self.root / "etcd" / "etcd.log")
        self._wait(lambda: _get_json(f"http://127.0.0.1:{self.etcd_port}/health").get("health") == "true",
                   timeout, "etcd healthy")
        for member in self.members:
            self.start_member(member)
        self.wait_healthy(timeout - (time.monotonic() - began))
        self.started_s = time.monotonic() - began
        return self.started_s

    def start_member(self, member: Member) -> None:
        member.proc = self._spawn(["patroni", str(member.config)], member.log)

    def stop(self) -> None:
        """Every Patroni (SIGTERM: each stops its PostgreSQL, fast), then etcd; a member that does
        not stop within 30 s is killed. Collects the logs into `log`."""
        for member in self.members:
            if member.proc is not None and member.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(member.proc.pid, signal.SIGTERM)
        for member in self.members:
            if member.proc is not None:
                try:
                    member.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self._kill_member(member)
                member.proc = None
            self._kill_postmaster(member)  # left running only if its Patroni died first
        if self.etcd is not None:
            self.etcd.kill()
            self.etcd.wait(timeout=30)
            self.etcd = None
        self._collect_logs()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def _collect_logs(self) -> None:
        parts = [self.root / "etcd" / "etcd.log", *(m.log for m in self.members)]
        with self.log.open("w") as out:
            for part in parts:
                if part.exists():
                    out.write(f"===== {part.relative_to(self.root)} =====\n{part.read_text(errors='replace')}\n")

    # --- reading the cluster -----------------------------------------------------------------
    def members_state(self) -> list[dict[str, Any]]:
        """The members as Patroni's REST API lists them (`/cluster` of the first member that
        answers): name, role (leader, sync_standby, replica), state, lag; [] when none answers."""
        for member in self.members:
            if member.proc is None:
                continue
            found = _get_json(f"http://127.0.0.1:{member.api}/cluster")
            if found.get("members"):
                return list(found["members"])
        return []

    def primary(self) -> str | None:
        """The name of the member that leads and runs, or None (none does now)."""
        return next((m["name"] for m in self.members_state() if m.get("role") == "leader"
                     and m.get("state") == "running"), None)

    def sync_standby(self) -> str | None:
        """The synchronous standby, streaming and caught up (lag 0), or None."""
        return next((m["name"] for m in self.members_state() if m.get("role") == "sync_standby"
                     and m.get("state") in ("streaming", "running") and m.get("lag") in (0, "0")), None)

    def member(self, name: str) -> Member:
        return next(m for m in self.members if m.name == name)

    def healthy(self) -> bool:
        """A primary, a caught-up synchronous standby (in synchronous mode), and every started
        member running."""
        state = self.members_state()
        started = {m.name for m in self.members if m.proc is not None}
        running = {m["name"] for m in state if m.get("state") in ("running", "streaming")}
        return bool(self.primary() and (self.sync_standby() or not self.synchronous) and started <= running)

    def wait_healthy(self, timeout: float = 60) -> None:
        self._wait(self.healthy, timeout, "a primary with a synchronous standby, every member running")

    def _wait(self, predicate: Any, timeout: float, what: str) -> Any:
        found = wait_until(predicate, max(timeout, 0.1), interval=0.1)
        if not found:
            raise RuntimeError(f"Patroni cluster: {what}: not within {timeout:.0f} s\n"
                               f"{json.dumps(self.members_state())}\n{self._tails()}")
        return found

    def _tails(self, chars: int = 1500) -> str:
        return "\n".join(f"--- {m.name} ---\n{m.log.read_text(errors='replace')[-chars:]}"
                         for m in self.members if m.log.exists())

    # --- the faults --------------------------------------------------------------------------
    def switchover(self, timeout: float = 60) -> tuple[str, str]:
        """A planned switchover (patronictl, as an operator runs it) from the primary to the
        synchronous standby; returns (old, new) once the new one leads."""
        old = self._wait(self.primary, timeout, "a primary")
        new = self._wait(self.sync_standby, timeout, "a synchronous standby")
        done = subprocess.run(["patronictl", "-c", str(self.member(old).config), "switchover", "--leader", old,
                               "--candidate", new, "--force", SCOPE], capture_output=True, text=True,
                              timeout=timeout, preexec_fn=self._demote, cwd=self.root)
        if done.returncode:
            raise RuntimeError(f"patronictl switchover failed: {done.stdout[-1500:]}{done.stderr[-1500:]}")
        self._wait(lambda: self.primary() == new, timeout, f"{new} leading after the switchover")
        return old, new

    def kill_primary(self) -> str:
        """The primary's node lost: kill -9 of its Patroni and of its postmaster's process group
        (every backend) at once. Killing the postmaster alone would not fail over: its Patroni,
        still holding the leader key, restarts it in place (crash recovery). Returns its name."""
        name = self._wait(self.primary, 30, "a primary")
        self._kill_member(self.member(name))
        return name

    def _kill_member(self, member: Member) -> None:
        if member.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(member.proc.pid, signal.SIGKILL)
            member.proc.wait(timeout=30)
            member.proc = None
        self._kill_postmaster(member)

    def _kill_postmaster(self, member: Member) -> None:
        """kill -9 of the member's postmaster and every process it started. Neither one process
        group nor the other holds them all: Patroni starts the postmaster through a helper that
        calls setsid(), and PostgreSQL makes each backend a process group of its own. So the
        postmaster is stopped first (it forks no more), its children are read from /proc, and
        all of them are killed in one go, as when a node is lost."""
        pid = member.postmaster_pid()
        if pid is None or not is_alive(pid):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
        for victim in [*children_of(pid), pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
        if not wait_until(lambda: not is_alive(pid), 10, interval=0.05):
            raise RuntimeError(f"{member.name}: postmaster {pid} still running after kill -9")

    def rejoin(self, name: str, timeout: float = 90) -> float:
        """Start a lost member's Patroni again; seconds until it runs as a replica (pg_rewind if
        its timeline went ahead) and the cluster is whole."""
        began = time.monotonic()
        self.start_member(self.member(name))
        self.wait_healthy(timeout)
        return time.monotonic() - began

    # --- asynchronous replication: what it loses ----------------------------------------------
    def configure(self, timeout: float = 60, **dcs: Any) -> None:
        """Change the cluster's dynamic configuration (PATCH /config, what `patronictl
        edit-config` does), e.g. synchronous_mode=False; waits until the primary applies it (its
        synchronous_standby_names empty without synchronous mode, set with it)."""
        leader = self.member(self._wait(self.primary, timeout, "a primary"))
        requests.patch(f"http://127.0.0.1:{leader.api}/config", json=dcs, timeout=10).raise_for_status()
        if "synchronous_mode" in dcs:
            self.synchronous = bool(dcs["synchronous_mode"])
            self._wait(lambda: bool(self._primary_setting("synchronous_standby_names")) == dcs["synchronous_mode"],
                       timeout, f"synchronous_mode {dcs['synchronous_mode']} applied")

    def _primary_setting(self, name: str) -> str | None:
        row = _query(self.url("postgres"), "SELECT current_setting(%s)", name)
        return str(row[0]) if row else None

    def stall_replication(self) -> list[int]:
        """Stop (SIGSTOP) the primary's WAL senders: what it commits from now on reaches no
        standby, as when the standbys fall behind a busy primary over a slow link. Without
        synchronous mode its commits go on being acknowledged; with it they wait. Returns the
        stopped pids (`kill_primary` kills them with the rest)."""
        primary = self.member(self._wait(self.primary, 30, "a primary"))
        postmaster = primary.postmaster_pid()
        assert postmaster is not None, f"{primary.name}: no postmaster.pid"
        senders = [pid for pid in children_of(postmaster) if "walsender" in command_line(pid)]
        assert senders, f"{primary.name}: no WAL sender to stall"
        for pid in senders:
            os.kill(pid, signal.SIGSTOP)
        return senders

    # --- the database ------------------------------------------------------------------------
    def create_database(self, name: str, timeout: float = 30) -> None:
        """CREATE DATABASE on the primary, then wait until every running member has replayed it.
        A synchronous commit waits for the standby to flush the WAL, not to replay it; until it
        has, a session for that database on a standby fails with "does not exist", and libpq
        takes that for the answer instead of trying the next host."""
        import psycopg2

        conn = psycopg2.connect(self.url("postgres"), connect_timeout=5)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        conn.close()
        for member in self.members:
            if member.proc is not None:
                dsn = f"host=127.0.0.1 port={member.port} user=postgres dbname=postgres"
                self._wait(lambda dsn=dsn: _query(dsn, "SELECT 1 FROM pg_database WHERE datname = %s", name),
                           timeout, f"{member.name} has database {name}")


def _get_json(url: str) -> dict[str, Any]:
    try:
        found = requests.get(url, timeout=2).json()
        return dict(found) if isinstance(found, dict) else {}
    except (requests.RequestException, ValueError):
        return {}


def _query(dsn: str, sql: str, *params: Any) -> tuple[Any, ...] | None:
    """The first row of `sql` on a fresh connection; None when it cannot connect or finds none."""
    import psycopg2

    try:
        conn = psycopg2.connect(dsn, connect_timeout=2)
    except psycopg2.OperationalError:
        return None
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            row = cur.fetchone()
            return tuple(row) if row else None
    finally:
        conn.close()
