"""Start real gpupool processes (Celery worker, beat) against the test database."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from django.conf import settings
from django.db import connection

REPO = Path(__file__).resolve().parents[2]


def test_database_url() -> str:
    """The URL of the database the tests are using right now (the test_ database)."""
    db = connection.settings_dict
    host = db.get("HOST") or "127.0.0.1"
    if host.startswith("/"):  # a Unix socket directory (the embedded server): URL-encoded as the host
        host = quote(host, safe="")
    port = db.get("PORT") or 5432
    user = db.get("USER") or "postgres"
    return f"postgres://{user}@{host}:{port}/{db['NAME']}"


def process_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(DATABASE_URL=test_database_url(), GPUPOOL_VAR_DIR=str(settings.VAR_DIR),
               DJANGO_SETTINGS_MODULE="pool.settings", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


@contextmanager
def celery_worker(log_path: Path, **env: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real `celery worker` process; waits until it is ready, stops it afterwards."""
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "pool", "worker", "-P", "solo", "-Q", "gpupool,gpupool.schedule",
         "-l", "INFO", "--without-gossip", "--without-mingle", "--without-heartbeat",
         "-n", f"test-{os.getpid()}@%h"],
        cwd=REPO, env=process_env(**env), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if b"ready." in log_path.read_bytes():
                break
            if proc.poll() is not None:
                raise RuntimeError(f"celery worker exited early:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        else:
            raise RuntimeError(f"celery worker not ready in 60 s:\n{log_path.read_text()[-3000:]}")
        yield proc
    finally:
        _stop(proc)
        log.close()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def web_server(log_path: Path, **env: str) -> Iterator[str]:
    """The production web server (gunicorn + uvicorn worker on pool.asgi) on a free loopback
    port; yields its base URL once /healthz answers."""
    import requests

    port = free_port()
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "pool.asgi:application", "-k", "uvicorn_worker.UvicornWorker",
         "--bind", f"127.0.0.1:{port}", "--workers", "1", "--graceful-timeout", "2"],
        cwd=REPO, env=process_env(**env), stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"web server did not start:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        yield url
    finally:
        _stop(proc)
        log.close()
