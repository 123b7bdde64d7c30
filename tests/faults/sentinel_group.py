"""A Redis Sentinel group of the suite's own: one master, one replica and three sentinels (quorum
2) on free loopback ports, under the test's folder, from the distribution's binaries
(`redis-server`, `redis-sentinel`); never the machine's Redis.

It offers the calls tests.faults.stack.Stack takes of its Redis (`start`, `kill`, `env`: the
processes reach it through REDIS_SENTINELS and REDIS_MASTER_NAME; `client`: the master's), plus
`master`, `kill_master`, `wait_failover` and `restart` for a failover scenario.

The sentinels start knowing each other and the replica (`sentinel myid`, `known-sentinel`,
`known-replica` in their files, as a sentinel writes them itself), so the group is ready at once
rather than after the hello and INFO rounds (2 s, 10 s) that would otherwise find them. Failure
detection is short (`down-after-milliseconds` 1000 by default), so a failover takes seconds.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import redis

from stacktools.ready import free_port, wait_port, wait_until

MASTER_NAME = "gpupool"


def missing_reason() -> str | None:
    """Why this machine cannot run a Sentinel group, or None when it can."""
    for binary in ("redis-server", "redis-sentinel"):
        if shutil.which(binary) is None:
            return f"{binary} is not installed (Debian: apt-get install redis-server redis-sentinel)"
    return None


class SentinelGroup:
    """Master + replica + three sentinels; `start`, `kill` (all of it), `env`, `client`, `master`,
    `kill_master`, `wait_failover`, `restart`."""

    def __init__(self, root: Path, *, down_after_ms: int = 1000, failover_timeout_ms: int = 3000) -> None:
        self.root = root / "sentinel-group"
        self.root.mkdir(parents=True, exist_ok=True)
        self.down_after_ms, self.failover_timeout_ms = down_after_ms, failover_timeout_ms
        self.ports = [free_port(), free_port()]  # the first starts as the master
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.servers: dict[int, subprocess.Popen[bytes]] = {}
        self.sentinels: dict[int, subprocess.Popen[bytes]] = {}

    # --- the duck interface of Stack's redis ----------------------------------------------------
    def env(self) -> dict[str, str]:
        """How the stack's processes reach it (REDIS_URL emptied: the two ways exclude each other)."""
        return {"REDIS_URL": "", "REDIS_SENTINELS": ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports),
                "REDIS_MASTER_NAME": MASTER_NAME}

    def start(self) -> None:
        """Start the group and wait until it is ready; on failure nothing is left running."""
        master, replica = self.ports
        try:
            self._start_server(master)
            self._start_server(replica, "--replicaof", "127.0.0.1", str(master))
            ids = {port: f"{port:040x}" for port in self.sentinel_ports}  # any 40 hex digits, unique
            for port in self.sentinel_ports:
                self._start_sentinel(port, ids)
            ok = wait_until(self._ready, timeout=30, interval=0.1)
            assert ok, f"sentinel group not ready in 30 s:\n{self.logs()}"
        except BaseException:
            self.kill()
            raise

    def client(self) -> redis.Redis:
        """A client of the master as the sentinels name it now (the scenario's own checks)."""
        return redis.Redis(port=self.master(), socket_timeout=10)

    def kill(self) -> None:
        """Everything, at once (SIGKILL): the group is thrown away."""
        for proc in [*self.sentinels.values(), *self.servers.values()]:
            _kill(proc)
        self.sentinels.clear()
        self.servers.clear()

    # --- a failover -----------------------------------------------------------------------------
    def master(self) -> int:
        """The master's port as the sentinels name it (the first that answers)."""
        for port in self.sentinel_ports:
            try:
                _host, master = ask(port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
                return int(master)
            except (redis.RedisError, TypeError):
                continue
        raise AssertionError(f"no sentinel names a master:\n{self.logs()}")

    def kill_master(self) -> int:
        """`kill -9` of the master; returns its port."""
        port = self.master()
        _kill(self.servers.pop(port))
        return port

    def wait_failover(self, old: int, timeout: float = 60) -> int:
        """Until every sentinel names a new master and it says it is one; returns its port."""
        def promoted() -> int | None:
            named = set()
            for port in self.sentinel_ports:
                try:
                    named.add(int(ask(port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)[1]))
                except (redis.RedisError, TypeError):
                    return None
            if len(named) != 1 or old in named:
                return None
            new = named.pop()
            try:
                return new if ask(new, "ROLE")[0] == "master" else None
            except redis.RedisError:
                return None

        new = wait_until(promoted, timeout=timeout, interval=0.05)
        assert new, f"no failover from {old} within {timeout:g} s:\n{self.logs()}"
        return int(new)

    def restart(self, port: int) -> None:
        """Start a server again on `port`, empty (the sentinels make a former master a replica)."""
        self._start_server(port)

    def replica_of(self, port: int, master: int) -> bool:
        """Whether the server on `port` replicates `master`, its link up."""
        try:
            info = _fields(ask(port, "INFO", "replication"))
        except redis.RedisError:
            return False
        return bool(info.get("role") == "slave" and int(info.get("master_port", 0)) == master
                    and info.get("master_link_status") == "up")

    def logs(self, chars: int = 1500) -> str:
        return "\n".join(f"--- {log.name} ---\n{log.read_text(errors='replace')[-chars:]}"
                         for log in sorted(self.root.glob("*.log")))

    # --- the parts ------------------------------------------------------------------------------
    def _start_server(self, port: int, *extra: str) -> None:
        # Diskless, without delay: a replica's first sync (and a former master's) takes milliseconds.
        argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(self.root), "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0", *extra]
        self.servers[port] = self._spawn(argv, f"redis-{port}.log")
        wait_port(port, 30, self.servers[port])

    def _start_sentinel(self, port: int, ids: dict[int, str]) -> None:
        master, replica = self.ports
        lines = [f"port {port}", "bind 127.0.0.1", f"dir {self.root}", f"sentinel myid {ids[port]}",
                 f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master} 2",
                 f"sentinel down-after-milliseconds {MASTER_NAME} {self.down_after_ms}",
                 f"sentinel failover-timeout {MASTER_NAME} {self.failover_timeout_ms}",
                 f"sentinel parallel-syncs {MASTER_NAME} 1",
                 f"sentinel known-replica {MASTER_NAME} 127.0.0.1 {replica}",
                 *(f"sentinel known-sentinel {MASTER_NAME} 127.0.0.1 {other} {ids[other]}"
                   for other in self.sentinel_ports if other != port)]
        config = self.root / f"sentinel-{port}.conf"  # a sentinel rewrites its file: one each
        config.write_text("\n".join(lines) + "\n")
        self.sentinels[port] = self._spawn(["redis-sentinel", str(config)], f"sentinel-{port}.log")
        wait_port(port, 30, self.sentinels[port])

    def _spawn(self, argv: list[str], log: str) -> subprocess.Popen[bytes]:
        with (self.root / log).open("ab") as out:
            return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def _ready(self) -> bool:
        """Every sentinel sees the master up, the replica and the two other sentinels, and the
        replica's link is up."""
        master, replica = self.ports
        if not self.replica_of(replica, master):
            return False
        for port in self.sentinel_ports:
            try:
                reply = ask(port, "SENTINEL", "MASTER", MASTER_NAME)
            except redis.RedisError:
                return False
            state = reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2], strict=True))
            if (int(state.get("num-slaves", 0)) < 1 or int(state.get("num-other-sentinels", 0)) < 2
                    or "s_down" in str(state.get("flags", ""))):
                return False
        return True



def ask(port: int, *command: Any) -> Any:
    """One command to the server or sentinel on `port` (a connection of its own, closed after)."""
    client = redis.Redis(port=port, socket_timeout=1, socket_connect_timeout=1, decode_responses=True)
    try:
        return client.execute_command(*command)
    finally:
        client.close()


def _fields(info: Any) -> dict[str, Any]:
    """INFO's reply: redis-py parses it into a dict already (it does for execute_command too)."""
    return info if isinstance(info, dict) else dict(line.split(":", 1) for line in str(info).splitlines()
                                                     if ":" in line)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
