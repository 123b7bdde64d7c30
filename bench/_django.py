"""Benchmark set-up: a fresh PostgreSQL database, migrated: on the machine's server at 127.0.0.1:5432
when one answers, else on the embedded one (core/embedded.py) under var/bench."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def setup(db_name: str, *, fresh: bool = True) -> str:
    """Point Django at a migrated database named `db_name`, new and empty unless `fresh` is False
    (then an existing one is kept, so a benchmark can measure again without rebuilding); return
    its vendor."""
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pool.settings")
    os.environ.setdefault("GPUPOOL_AUTOSCHEDULE", "0")
    os.environ.setdefault("GPUPOOL_VAR_DIR", tempfile.mkdtemp(prefix="gpupool-bench-"))
    if "DATABASE_URL" not in os.environ:
        os.environ["DATABASE_URL"] = _fresh_database(db_name, fresh=fresh)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django.db import connection

    return connection.vendor


def _fresh_database(db_name: str, *, fresh: bool) -> str:
    """The URL of database `db_name`, created (or recreated when `fresh`) on the machine's
    PostgreSQL, or on the embedded one when none answers (and then said, since figures differ)."""
    import psycopg2

    try:
        conn = psycopg2.connect(host="127.0.0.1", user="postgres", dbname="postgres", connect_timeout=3)
        url = f"postgres://postgres@127.0.0.1:5432/{db_name}"
    except psycopg2.OperationalError as exc:
        from core import embedded

        print(f"(no PostgreSQL on 127.0.0.1:5432: {exc.__class__.__name__}; measuring on the embedded one)")
        base = embedded.postgres_url(REPO / "var" / "bench")
        conn = psycopg2.connect(base)
        url = base.rsplit("/", 1)[0] + f"/{db_name}"
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db_name])
        exists = cur.fetchone() is not None
        if fresh or not exists:
            cur.execute(f'DROP DATABASE IF EXISTS "{db_name}"')
            cur.execute(f'CREATE DATABASE "{db_name}"')
    conn.close()
    return url
