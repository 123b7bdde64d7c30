"""What this machine needs to run the fault suite's Patroni cluster (tests.faults.patroni): Patroni,
patronictl and etcd on the PATH, a distribution PostgreSQL Patroni supports with every tool it
runs, and, as root, a `postgres` user to own the data. `missing_reason` says what is absent, so the
scenarios skip naming it."""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

from tests.faults.servers import _as_postgres

TOOLS = ("initdb", "postgres", "pg_basebackup", "pg_rewind")


def postgres_15_bin() -> Path | None:
    """The newest distribution PostgreSQL with every tool Patroni runs (Patroni 3.0: up to 15)."""
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[4]), reverse=True):
        if int(folder.split("/")[4]) <= 15 and all(os.access(f"{folder}/{t}", os.X_OK) for t in TOOLS):
            return Path(folder)
    return None


def missing_reason() -> str | None:
    """Why this machine cannot run a Patroni cluster (None when it can)."""
    absent = [name for name in ("patroni", "patronictl", "etcd") if shutil.which(name) is None]
    if absent:
        return f"{', '.join(absent)} not installed (apt-get install patroni etcd-server)"
    if postgres_15_bin() is None:
        return ("no PostgreSQL ≤ 15 with initdb, pg_basebackup and pg_rewind under /usr/lib/postgresql "
                "(apt-get install postgresql)")
    if os.geteuid() == 0 and not _has_postgres_user():
        return "running as root and no `postgres` user to run the cluster as"
    return None


def _has_postgres_user() -> bool:
    try:
        return _as_postgres() is not None
    except AssertionError:
        return False
