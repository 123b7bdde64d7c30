"""DATABASE_URL as libpq reads it (core/database_url.py): one server or several (a PostgreSQL HA
cluster), every query parameter a connection option, the multi-host defaults, loud errors that
never show the password; and Django connecting through such a URL to the one server that
answers, the first host being dead."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from core.database_url import (
    DatabaseUrlError,
    database_url,
    hosts,
    is_local,
    parse_database_url,
)
from stacktools.ready import free_port

REPO = Path(__file__).resolve().parent.parent.parent
CLUSTER = ("postgres://postgres@127.0.0.1:5001,127.0.0.1:5002,127.0.0.1:5003/gpupool"
           "?target_session_attrs=read-write&application_name=worker-a")


def test_a_multi_host_url_gives_libpq_its_host_and_port_lists_and_the_options() -> None:
    db = parse_database_url(CLUSTER, conn_max_age=60, conn_health_checks=True)
    assert (db["NAME"], db["USER"], db["PASSWORD"]) == ("gpupool", "postgres", "")
    assert (db["HOST"], db["PORT"]) == ("127.0.0.1,127.0.0.1,127.0.0.1", "5001,5002,5003")
    assert db["OPTIONS"] == {"target_session_attrs": "read-write", "application_name": "worker-a",
                             "connect_timeout": "5"}
    assert (db["CONN_MAX_AGE"], db["CONN_HEALTH_CHECKS"]) == (60, True)
    assert hosts(db) == [("127.0.0.1", "5001"), ("127.0.0.1", "5002"), ("127.0.0.1", "5003")]


def test_several_hosts_default_to_the_primary_and_a_connect_timeout_but_the_url_decides() -> None:
    plain = parse_database_url("postgres://u@db1,db2/gpupool")
    assert plain["OPTIONS"] == {"target_session_attrs": "read-write", "connect_timeout": "5"}
    assert hosts(plain) == [("db1", ""), ("db2", "")]  # libpq's default port for each
    given = parse_database_url("postgres://u@db1:5433,db2/gpupool?target_session_attrs=primary&connect_timeout=2")
    assert given["OPTIONS"] == {"target_session_attrs": "primary", "connect_timeout": "2"}
    assert hosts(given) == [("db1", "5433"), ("db2", "")]


def test_one_server_is_read_as_before_without_defaults() -> None:
    db = parse_database_url("postgresql://gpupool:s%40cret@db.internal:5432/gpupool?sslmode=require")
    assert (db["NAME"], db["USER"], db["PASSWORD"], db["HOST"], db["PORT"]) == (
        "gpupool", "gpupool", "s@cret", "db.internal", "5432")
    assert db["OPTIONS"] == {"sslmode": "require"}
    assert db["ENGINE"] == "core.db.postgresql"
    socket = parse_database_url("postgres://postgres@%2Ftmp%2Fgpupool-pg:5432/gpupool")  # the embedded engine
    assert (socket["HOST"], socket["PORT"], socket["OPTIONS"]) == ("/tmp/gpupool-pg", "5432", {})
    assert is_local(socket) and not is_local(db)


def test_local_means_every_host_is_on_this_machine() -> None:
    assert is_local(parse_database_url(CLUSTER))
    assert is_local(parse_database_url("postgres://u@localhost,[::1]:5433/x"))
    assert not is_local(parse_database_url("postgres://u@127.0.0.1,db.internal/x"))


@pytest.mark.parametrize("url", [
    CLUSTER,
    "postgres://gpupool:p%40ss%2Fw@db.internal:5432/gpupool?sslmode=require",
    "postgres://postgres@%2Ftmp%2Fgpupool-pg:5432/gpupool",
    "postgresql://u@[::1]:5433,db2/gpu%20pool",
])
def test_the_url_of_an_entry_reads_back_as_the_same_entry(url: str) -> None:
    db = parse_database_url(url)
    assert parse_database_url(database_url(db)) == db
    assert parse_database_url(database_url(db, dbname="postgres"))["NAME"] == "postgres"


@pytest.mark.parametrize(("url", "says"), [
    ("mysql://u:sekrit@db/x", "must start with postgres://"),
    ("sqlite:///var/db.sqlite3", "must start with postgres://"),
    ("postgres://u:sekrit@db:54x2/x", "'54x2' is not a port number"),
    ("postgres://u:sekrit@db1:5432,db2:99999/x", "'99999' is not a port number"),
    ("postgres://u:sekrit@db/x?no_such_option=1", 'invalid URI query parameter: "no_such_option"'),
    ("postgres://u:sekrit@[::1/x", "IPv6 host address"),
])
def test_a_url_libpq_would_refuse_stops_the_start_and_never_shows_the_password(url: str, says: str) -> None:
    with pytest.raises(DatabaseUrlError) as caught:
        parse_database_url(url)
    assert says in str(caught.value) and "sekrit" not in str(caught.value)


def test_hosts_and_ports_of_different_lengths_are_refused() -> None:
    with pytest.raises(DatabaseUrlError, match="3 hosts but 2 ports"):
        hosts({"HOST": "a,b,c", "PORT": "1,2"})


@pytest.mark.django_db
def test_django_connects_through_a_multi_host_url_to_the_server_that_answers(tmp_path: Path) -> None:
    """A fresh process on the settings a multi-host DATABASE_URL gives: its first host is a port
    nothing listens on, the second the test database's server; libpq skips the first."""
    test_db = connection.settings_dict
    server = hosts(test_db)[0]
    url = database_url({**test_db, "HOST": f"127.0.0.1,{server[0] or '127.0.0.1'}",
                        "PORT": f"{free_port()},{server[1] or '5432'}",
                        "OPTIONS": {"application_name": "multi-host-test"}}, dbname=test_db["NAME"])
    script = ("import json, django; django.setup(); from django.conf import settings; "
              "from django.db import connection; cur = connection.cursor(); "
              "cur.execute('SELECT inet_server_port(), current_database(), current_setting(%s)', "
              "['application_name']); print(json.dumps([settings.DATABASES['default'], cur.fetchone()]))")
    env = {**os.environ, "DATABASE_URL": url,
           "GPUPOOL_VAR_DIR": str(tmp_path / "var"), "DJANGO_SETTINGS_MODULE": "pool.settings"}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    settings_entry, (port, name, application) = json.loads(done.stdout.strip().splitlines()[-1])
    assert settings_entry["HOST"].count(",") == 1 and settings_entry["OPTIONS"]["target_session_attrs"] == "read-write"
    assert port in (int(server[1] or 5432), None)  # None: a Unix socket has no port
    assert (name, application) == (test_db["NAME"], "multi-host-test")
