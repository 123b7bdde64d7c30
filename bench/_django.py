"""Benchmark set-up: a fresh PostgreSQL database (or SQLite when none answers), migrated."""

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
        try:
            import psycopg2

            conn = psycopg2.connect(host="127.0.0.1", user="postgres", dbname="postgres", connect_timeout=3)
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db_name])
                exists = cur.fetchone() is not None
                if fresh or not exists:
                    cur.execute(f'DROP DATABASE IF EXISTS "{db_name}"')
                    cur.execute(f'CREATE DATABASE "{db_name}"')
            conn.close()
            os.environ["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{db_name}"
        except Exception as exc:  # no PostgreSQL: still measure, on SQLite, and say so
            print(f"(PostgreSQL unavailable: {exc.__class__.__name__}; measuring on SQLite)")
            os.environ["DATABASE_URL"] = f"sqlite:///{os.environ['GPUPOOL_VAR_DIR']}/{db_name}.sqlite3"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django.db import connection

    return connection.vendor
