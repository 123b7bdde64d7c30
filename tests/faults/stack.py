"""The whole of gpupool as real processes on the suite's own servers: PostgreSQL and Redis
(tests.faults.servers), the web server (gunicorn, two workers), two Celery workers and beat, started
as stacktools.processes starts them (in sessions of their own, so that `Proc.kill9` takes a process
and its children down at once, as the OOM killer would). Every process names itself to PostgreSQL
(`application_name`), so a scenario can tell from `pg_stat_activity` which one holds a pool's
scheduling lock.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import requests

from stacktools.processes import (
    BEAT_READY,
    PY,
    REPO,
    WORKER_READY,
    Proc,
    answers,
    beat_command,
    log_says,
    web_command,
    worker_command,
)
from stacktools.ready import free_port, wait_http_ok
from tests.faults.servers import PostgresServer, RedisServer

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


class Stack:
    """PostgreSQL + Redis + web + two workers + beat, configured by `config` (apply's format, JSON)."""

    def __init__(self, root: Path, config: dict[str, Any], users: dict[str, dict[str, Any]], *,
                 pg: Any = None, redis: Any = None) -> None:
        """`pg` and `redis`: the engines (default: one PostgresServer, one RedisServer). Another
        engine (a Patroni cluster, a Sentinel group) offers the same calls: pg `start`, `stop`,
        `remove`, `create_database`, `url(dbname, **params)`, `log`; redis `start`, `kill`, `env()`."""
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.pg = pg if pg is not None else PostgresServer()
        self.redis = redis if redis is not None else RedisServer(root)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config, self.users = config, users
        self.tokens: dict[str, str] = {}
        self.procs: dict[str, Proc] = {}

    def env(self, name: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "DJANGO_", "GPUPOOL_"))}
        env.update(self.redis.env())
        env.update(DATABASE_URL=self.pg.url(application_name=name),
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
        self.wait_ready()

    def wait_ready(self, user: str = "admin", timeout: float = 90) -> None:
        """Until the API answers `user` (healthz answers before the first authenticated request
        does: a worker of gunicorn's may still be starting, on a busy machine for seconds)."""
        headers = {"Authorization": f"Token {self.tokens[user]}"}
        try:
            wait_http_ok(f"{self.url}/api/v1/leases/?limit=1", timeout, headers=headers, what=f"the API, for {user},")
        except RuntimeError as error:
            raise RuntimeError(f"{error}\n{self.dump_logs()}") from None

    def _define(self) -> None:
        logs = self.root / "logs"
        logs.mkdir(exist_ok=True)
        for name in ("worker-a", "worker-b"):
            argv = worker_command(name, "gpupool,gpupool.schedule", 2, "INFO", "-P", "prefork")
            self.procs[name] = Proc(name, argv, self.env(name), logs / f"{name}.log", log_says(WORKER_READY))
        self.procs["beat"] = Proc("beat", beat_command("INFO", self.root / "var" / "beat-schedule"),
                                  self.env("beat"), logs / "beat.log", log_says(BEAT_READY))
        self.procs["web"] = Proc("web", web_command(self.port, 2, "--access-logfile", "-"), self.env("web"),
                                 logs / "web.log", answers(f"{self.url}/healthz"))

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.stop()
        self.redis.kill()
        self.pg.stop()
        if self.pg.log.exists():  # kept beside the other logs: the cluster's folder goes
            shutil.copy(self.pg.log, self.root / "logs" / "postgres.log")
        self.pg.remove()

    def redis_client(self) -> Any:
        """A client of the stack's Redis (the engine's own: a Sentinel group gives its master)."""
        return self.redis.client()

    def http(self, user: str) -> requests.Session:
        session = requests.Session()
        session.headers["Authorization"] = f"Token {self.tokens[user]}"
        return session

    def api(self, http: requests.Session, method: str, path: str, timeout: float = 60, **kwargs: Any) -> Any:
        """A scenario's own API call, outside its fault: retried on connection errors and 5xx until
        `timeout`, then its JSON; an AssertionError naming the answer if it is not a 2xx."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                response = http.request(method, f"{self.url}{path}", timeout=30, **kwargs)
                last = f"{response.status_code} {response.text[:300]!r}"
                if response.status_code < 500:
                    break
            except requests.RequestException as error:
                last = type(error).__name__
            assert time.monotonic() < deadline, f"{method} {path}: no answer within {timeout:g} s (last: {last})"
            time.sleep(0.2)
        assert response.ok, f"{method} {path}: {last}"
        return response.json()

    def dump_logs(self) -> str:
        return "\n".join(f"--- {name} ---\n{proc.tail(2000)}" for name, proc in self.procs.items())
