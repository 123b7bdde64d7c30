"""The whole of gpupool as real processes on the suite's own servers: PostgreSQL and Redis
(tests.faults.servers), the web server (gunicorn, two workers), two Celery workers and beat.

Each process runs in a session of its own, so `kill9` takes it down as the kernel's OOM killer or a
lost node would: the process and its children (gunicorn's and Celery's pool workers) at once,
without a chance to clean up. Every process names itself to PostgreSQL (`application_name`), so a
scenario can tell from `pg_stat_activity` which one holds a pool's scheduling lock.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from tests.faults.servers import PostgresServer, RedisServer
from tests.support.processes import REPO, free_port

PY = sys.executable
#: The scheduling pass and beat's periodic entries: short, so recovery is measured in seconds.
PASS_INTERVAL_S = 2
SETUP = """
import json, sys
import django
django.setup()
from django.contrib.auth import get_user_model
from allocation.models import Team
from core.tokens import token_issue
tokens = {}
for name, spec in json.loads(sys.argv[1]).items():
    user, _ = get_user_model().objects.get_or_create(username=name)
    user.is_staff = bool(spec.get("admin"))
    user.save()
    for team in spec.get("teams", []):
        Team.objects.get(name=team).members.add(user)
    tokens[name] = token_issue(user=user, name="fault suite")
print("@@tokens " + json.dumps(tokens))
"""


class Proc:
    """One gpupool process (and its children), restartable."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path,
                 ready: Callable[[Proc], bool]) -> None:
        self.name, self.argv, self.env, self.log_path, self.ready = name, argv, env, log, ready
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

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

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=20)
        except ProcessLookupError:
            pass
        self.proc = None


def _log_says(text: str) -> Callable[[Proc], bool]:
    return lambda proc: text in proc.log_since_start()


class Stack:
    """PostgreSQL + Redis + web + two workers + beat, configured by `config` (apply's format, JSON)."""

    def __init__(self, root: Path, config: dict[str, Any], users: dict[str, dict[str, Any]]) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.pg = PostgresServer()
        self.redis = RedisServer(root)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config, self.users = config, users
        self.tokens: dict[str, str] = {}
        self.procs: dict[str, Proc] = {}

    def env(self, name: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "DJANGO_", "GPUPOOL_"))}
        env.update(DATABASE_URL=self.pg.url(application_name=name), REDIS_URL=self.redis.url(),
                   DJANGO_SETTINGS_MODULE="pool.settings", GPUPOOL_VAR_DIR=str(self.root / "var"),
                   GPUPOOL_AUTOSCHEDULE="1", GPUPOOL_PASS_INTERVAL_S=str(PASS_INTERVAL_S),
                   GPUPOOL_LEASE_RATE="100000000/min", PYTHONUNBUFFERED="1", DB_CONN_MAX_AGE="60")
        return env

    def manage(self, *args: str, timeout: float = 300) -> str:
        done = subprocess.run([PY, "manage.py", *args], cwd=REPO, env=self.env("manage"), capture_output=True,
                              text=True, timeout=timeout)
        if done.returncode:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
        return done.stdout

    def start(self) -> None:
        self.pg.start()
        self.pg.create_database("gpupool")
        self.redis.start()
        (self.root / "var").mkdir(exist_ok=True)
        config = self.root / "config.json"  # YAML is a superset of JSON: apply reads it as is
        config.write_text(json.dumps(self.config))
        self.manage("migrate", "--no-input", "-v", "0")
        self.manage("apply", "-f", str(config))
        self.manage("discover")
        done = subprocess.run([PY, "-c", SETUP, json.dumps(self.users)], cwd=REPO, env=self.env("setup"),
                              capture_output=True, text=True, timeout=120)
        line = next((x for x in done.stdout.splitlines() if x.startswith("@@tokens ")), None)
        assert line, f"token setup failed:\n{done.stderr[-3000:]}"
        self.tokens = json.loads(line[len("@@tokens "):])
        self._define()
        for proc in self.procs.values():
            proc.start()

    def _define(self) -> None:
        logs = self.root / "logs"
        logs.mkdir(exist_ok=True)
        for name in ("worker-a", "worker-b"):
            self.procs[name] = Proc(name, [
                PY, "-m", "celery", "-A", "pool", "worker", "-P", "prefork", "-c", "2",
                "-Q", "gpupool,gpupool.schedule", "-l", "INFO", "-n", f"{name}@%h",
                "--without-gossip", "--without-mingle"], self.env(name), logs / f"{name}.log", _log_says("ready."))
        self.procs["beat"] = Proc("beat", [
            PY, "-m", "celery", "-A", "pool", "beat", "-l", "INFO", "-s", str(self.root / "var" / "beat-schedule")],
            self.env("beat"), logs / "beat.log", _log_says("beat: Starting"))
        self.procs["web"] = Proc("web", [
            PY, "-m", "gunicorn", "pool.asgi:application", "-k", "uvicorn_worker.UvicornWorker",
            "--bind", f"127.0.0.1:{self.port}", "--workers", "2", "--graceful-timeout", "2",
            "--access-logfile", "-"], self.env("web"), logs / "web.log", lambda _: self.healthy())

    def healthy(self) -> bool:
        try:
            return requests.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.stop()
        self.redis.kill()
        self.pg.stop()
        if self.pg.log.exists():  # kept beside the other logs: the cluster's folder goes
            shutil.copy(self.pg.log, self.root / "logs" / "postgres.log")
        self.pg.remove()

    def http(self, user: str) -> requests.Session:
        session = requests.Session()
        session.headers["Authorization"] = f"Token {self.tokens[user]}"
        return session

    def dump_logs(self) -> str:
        return "\n".join(f"--- {name} ---\n{proc.tail(2000)}" for name, proc in self.procs.items())
