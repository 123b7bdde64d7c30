"""Secure defaults when DEBUG is off: no start without SECRET_KEY where the database is on another
machine (embedded and single-machine runs keep their generated key), and with GPUPOOL_TLS=1 the
deployment checks pass (HSTS, secure cookies, the proxy's HTTPS header), each run as a fresh
`manage.py` process with the environment a deployment would give it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from core import embedded

REPO = Path(__file__).resolve().parent.parent
REMOTE_DB = "postgres://gpupool:secret@db.internal:5432/gpupool"
SECRET = "k" * 10 + "-Zx9_" + "q7" * 30  # long and varied enough for Django's W009


@pytest.fixture(autouse=True)
def _stop_embedded_engines(tmp_path: Path) -> Iterator[None]:
    """A process with no DATABASE_URL / REDIS_URL starts the embedded engines under its var/."""
    yield
    embedded.stop_postgres(tmp_path / "var")
    embedded.stop_redis(tmp_path / "var")


def _manage(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items()
            if k not in {"SECRET_KEY", "DEBUG", "DATABASE_URL", "REDIS_URL", "GPUPOOL_TLS", "ALLOWED_HOSTS"}}
    base.update({"GPUPOOL_VAR_DIR": str(tmp_path / "var"), "DJANGO_SETTINGS_MODULE": "pool.settings", **env})
    return subprocess.run([sys.executable, str(REPO / "manage.py"), *args], env=base, cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_a_remote_database_without_secret_key_refuses_to_start_and_says_why(tmp_path: Path) -> None:
    result = _manage(tmp_path, "check", DATABASE_URL=REMOTE_DB)
    assert result.returncode != 0
    assert "SECRET_KEY is required" in result.stderr and "db.internal" in result.stderr
    assert "secret" not in result.stderr.split("SECRET_KEY is required")[1].split("db.internal")[0]  # no password


@pytest.mark.parametrize("env", [
    {},                                                                      # embedded: PostgreSQL and Redis under var/
    {"DATABASE_URL": "postgres://postgres@127.0.0.1:5432/gpupool"},         # one machine
    {"DATABASE_URL": REMOTE_DB, "DEBUG": "1"},                                 # development
    {"DATABASE_URL": REMOTE_DB, "SECRET_KEY": SECRET},                       # production, configured
], ids=["embedded", "loopback", "debug", "configured"])
def test_everything_else_starts(tmp_path: Path, env: dict[str, str]) -> None:
    result = _manage(tmp_path, "check", **env)
    assert result.returncode == 0, result.stderr[-2000:]


def test_behind_tls_check_deploy_is_clean_but_for_the_preload_opt_in(tmp_path: Path) -> None:
    result = _manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING", DATABASE_URL=REMOTE_DB,
                     SECRET_KEY=SECRET, GPUPOOL_TLS="1", ALLOWED_HOSTS="gpupool.example.com")
    issues = set(re.findall(r"^\?: \(([\w.]+)\)", result.stderr, re.MULTILINE))
    assert issues == {"security.W021"}, result.stderr  # HSTS preload: opt-in (GPUPOOL_HSTS_PRELOAD=1)
    preload = _manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING", DATABASE_URL=REMOTE_DB,
                      SECRET_KEY=SECRET, GPUPOOL_TLS="1", GPUPOOL_HSTS_PRELOAD="1",
                      ALLOWED_HOSTS="gpupool.example.com")
    assert preload.returncode == 0, preload.stderr


def test_without_tls_check_deploy_names_what_gpupool_tls_would_fix(tmp_path: Path) -> None:
    result = _manage(tmp_path, "check", "--deploy", DATABASE_URL=REMOTE_DB, SECRET_KEY=SECRET)
    for check in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert check in result.stderr, result.stderr


def test_the_tls_settings_themselves(tmp_path: Path) -> None:
    script = ("from django.conf import settings as s; print(s.SECURE_PROXY_SSL_HEADER, s.SESSION_COOKIE_SECURE, "
              "s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS, s.SECURE_SSL_REDIRECT, s.SECURE_REDIRECT_EXEMPT)")
    result = _manage(tmp_path, "shell", "-c", script, SECRET_KEY=SECRET, GPUPOOL_TLS="1")
    assert result.stdout.strip().splitlines()[-1] == ("('HTTP_X_FORWARDED_PROTO', 'https') True True 31536000 True "
                                     "['^healthz/?$', '^metrics/?$']"), result.stderr
