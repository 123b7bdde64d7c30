"""The gpupool processes of scripts/run.sh as command lines, and a handle that starts one, waits
until it is ready, and stops or kills it (with its children).

Each process runs in a session of its own, so `kill9` takes it down as the kernel's OOM killer or a
lost node would: the process and its children (gunicorn's and Celery's pool workers) at once,
without a chance to clean up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from stacktools.ready import http_ok

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
#: Celery's line once a worker consumes (logged at INFO).
WORKER_READY = "ready."
#: Beat's line once it runs its schedule (logged at INFO).
BEAT_READY = "beat: Starting"


def web_command(port: int, workers: int = 2, *extra: str) -> list[str]:
    """The production web server: gunicorn managing uvicorn workers on pool.asgi, with the tuned
    configuration of `make run` (pool/gunicorn_conf.py); `workers` and `extra` override it."""
    return [PY, "-m", "gunicorn", "-c", "python:pool.gunicorn_conf", "pool.asgi:application", "-k",
            "uvicorn_worker.UvicornWorker",
            "--bind", f"127.0.0.1:{port}", "--workers", str(workers), "--graceful-timeout", "2", *extra]


def worker_command(name: str, queues: str = "gpupool,gpupool.schedule", concurrency: int = 1,
                   loglevel: str = "INFO", *extra: str) -> list[str]:
    """A Celery worker consuming `queues`, node name `name@host`."""
    return [PY, "-m", "celery", "-A", "pool", "worker", "-c", str(concurrency), "-Q", queues, "-n", f"{name}@%h",
            "-l", loglevel, "--without-gossip", "--without-mingle", *extra]


def beat_command(loglevel: str = "INFO", schedule: Path | None = None) -> list[str]:
    """Celery beat (the one periodic registry of pool.celery); `schedule`: its state file."""
    return [PY, "-m", "celery", "-A", "pool", "beat", "-l", loglevel, *(["-s", str(schedule)] if schedule else [])]


class Proc:
    """One gpupool process (and its children), restartable; `ready(proc)` says when it serves."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path,
                 ready: Callable[[Proc], bool] = lambda _: True) -> None:
        self.name, self.argv, self.env, self.log_path, self.ready = name, argv, env, log, ready
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.mark = 0

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} is not running"
        return self.proc.pid

    def start(self, timeout: float = 90) -> float:
        """Start it and wait until ready; returns the seconds that took."""
        began = time.monotonic()
        self.mark = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.argv, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.starts += 1
        while not self.ready(self):
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
            if time.monotonic() - began > timeout:
                raise RuntimeError(f"{self.name} not ready after {timeout:.0f} s:\n{self.tail()}")
            time.sleep(0.1)
        return time.monotonic() - began

    def log_since_start(self) -> str:
        with self.log_path.open("rb") as log:
            log.seek(self.mark)
            return log.read().decode(errors="replace")

    def tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def kill9(self) -> None:
        """SIGKILL to the whole process group: no handler runs, nothing is acknowledged."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.proc = None

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM to the process group (a warm shutdown); SIGKILL after `timeout`."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=20)
        except ProcessLookupError:
            pass
        self.proc = None


def log_says(text: str) -> Callable[[Proc], bool]:
    """Ready once the process's log (since it started) holds `text`."""
    return lambda proc: text in proc.log_since_start()


def answers(url: str) -> Callable[[Proc], bool]:
    """Ready once GET `url` answers 200."""
    return lambda _: http_ok(url, timeout=1)


def is_alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def children_of(pid: int) -> list[int]:
    """The processes whose parent is `pid` (read from /proc: Linux)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def command_line(pid: int) -> str:
    """The command line of `pid` as `ps` shows it ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


@contextlib.contextmanager
def running(procs: list[Proc], timeout: float = 90) -> Iterator[list[Proc]]:
    """Start `procs` in order (each ready before the next), stop them all on the way out."""
    try:
        for proc in procs:
            proc.start(timeout)
        yield procs
    finally:
        for proc in reversed(procs):
            proc.stop()
