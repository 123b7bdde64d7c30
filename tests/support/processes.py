"""Start real gpupool processes (web server, Celery worker) against the test database; the command
lines and the waits are stacktools' (shared with the benchmarks and the fault stack)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.db import connection

from core.database_url import database_url
from stacktools.processes import WORKER_READY, Proc, answers, log_says, web_command, worker_command
from stacktools.processes import running as stack_running
from stacktools.ready import free_port


def test_database_url() -> str:
    """The URL of the database the tests are using right now (the test_ database): its servers
    (several, for an HA cluster) and connection options as the settings have them."""
    db = connection.settings_dict
    return database_url({**db, "HOST": db.get("HOST") or "127.0.0.1", "PORT": db.get("PORT") or "5432",
                         "USER": db.get("USER") or "postgres"})


def process_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    # The tests' Redis: its URL, or (a Sentinel group) REDIS_SENTINELS as inherited, REDIS_URL emptied.
    redis_url = "" if settings.REDIS_TARGET.uses_sentinel else settings.REDIS_URL
    env.update(DATABASE_URL=test_database_url(), REDIS_URL=redis_url, GPUPOOL_VAR_DIR=str(settings.VAR_DIR),
               DJANGO_SETTINGS_MODULE="pool.settings", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


@contextmanager
def celery_worker(log_path: Path, **env: str) -> Iterator[Proc]:
    """A real `celery worker` process (solo pool); waits until it is ready, stops it afterwards."""
    log_path.unlink(missing_ok=True)
    argv = worker_command(f"test-{os.getpid()}", "gpupool,gpupool.schedule", 1, "INFO", "-P", "solo",
                          "--without-heartbeat")
    with stack_running([Proc("celery worker", argv, process_env(**env), log_path, log_says(WORKER_READY))],
                       timeout=60) as (worker,):
        yield worker


@contextmanager
def web_server(log_path: Path, **env: str) -> Iterator[str]:
    """The production web server (gunicorn + uvicorn worker on pool.asgi) on a free loopback
    port; yields its base URL once /healthz answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path.unlink(missing_ok=True)
    with stack_running([Proc("web server", web_command(port, 1), process_env(**env), log_path,
                             answers(f"{url}/healthz"))], timeout=60):
        yield url
