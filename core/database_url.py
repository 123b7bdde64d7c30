"""DATABASE_URL → Django's DATABASES entry, read by libpq's own parser.

A URL names one server (`postgres://user@db:5432/gpupool`) or, for a PostgreSQL HA cluster
(Patroni, a primary with standbys), several: `postgres://user@h1:5432,h2:5432,h3:5432/gpupool?
target_session_attrs=read-write`. libpq accepts comma lists of hosts and ports and tries them in
order until one has the session attributes asked for; Django hands HOST and PORT to the driver as
they are, so `HOST="h1,h2,h3"`, `PORT="5432,5432,5432"` reach libpq unchanged. dj-database-url
(and urllib) cannot split such a netloc (one port each, an int), hence psycopg2's `parse_dsn`,
which is libpq's parser: what it accepts is exactly what the driver will accept, percent-decoding,
IPv6 brackets and Unix socket folders (`%2Frun%2Fpostgresql`) included. Every query parameter is a
libpq connection parameter and goes to OPTIONS (application_name, sslmode, connect_timeout, …).

With several hosts, two defaults apply where the URL does not set them:
- `target_session_attrs=read-write`: gpupool writes on every request, so a session on a standby
  would only fail; libpq skips standbys (and a primary being demoted) and finds the new primary;
- `connect_timeout=5` (seconds, per host): a host that drops packets (a lost node) would otherwise
  hold every new connection for the kernel's TCP timeout, minutes, before libpq tries the next.

No Django here: pool.settings calls this while settings are being built.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

from psycopg2 import ProgrammingError
from psycopg2.extensions import parse_dsn

SCHEMES = ("postgres://", "postgresql://")
MULTI_HOST_DEFAULTS = {"target_session_attrs": "read-write", "connect_timeout": "5"}
LOCAL_HOSTS = frozenset({"", "localhost", "127.0.0.1", "::1"})
_FIELDS = {"dbname": "NAME", "user": "USER", "password": "PASSWORD", "host": "HOST", "port": "PORT"}
# OPTIONS that Django's backend reads itself and never hands to libpq.
_DJANGO_OPTIONS = frozenset({"isolation_level", "assume_role", "server_side_binding", "pool", "cursor_factory"})
_PASSWORD = re.compile(r"(://[^/@:]*:)[^@/]*@")


class DatabaseUrlError(ValueError):
    """A DATABASE_URL that is not a PostgreSQL URL libpq accepts; the message says why."""


def parse_database_url(url: str, *, conn_max_age: int = 0, conn_health_checks: bool = False) -> dict[str, Any]:
    """Django's DATABASES entry for `url`: NAME, USER, PASSWORD, HOST, PORT as libpq reads them
    (HOST and PORT comma lists for several hosts, "" where absent), every other parameter in
    OPTIONS, with the multi-host defaults above. DatabaseUrlError for anything else (another
    scheme, a URL libpq refuses); the password never appears in the message."""
    if not url.startswith(SCHEMES):
        raise DatabaseUrlError(f"DATABASE_URL must start with postgres:// or postgresql:// (got {url.split(':')[0]!r})")
    try:
        params = parse_dsn(url)
    except ProgrammingError as error:  # libpq's own words, which may quote the URL: password hidden
        message = _PASSWORD.sub(r"\1***@", str(error).strip())
        raise DatabaseUrlError(f"DATABASE_URL is not a URL libpq accepts: {message}") from None
    entry: dict[str, Any] = {"ENGINE": "core.db.postgresql",  # Django's, health check aside
                             **{key: params.pop(name, "") for name, key in _FIELDS.items()},
                             "CONN_MAX_AGE": conn_max_age, "CONN_HEALTH_CHECKS": conn_health_checks,
                             "DISABLE_SERVER_SIDE_CURSORS": False}
    servers = hosts(entry)
    bad = [port for _, port in servers if port and not (port.isdigit() and 0 < int(port) < 65536)]
    if bad:  # libpq would only say so at the first connection
        raise DatabaseUrlError(f"DATABASE_URL: {bad[0]!r} is not a port number")
    if len(servers) > 1:
        params = {**MULTI_HOST_DEFAULTS, **params}
    entry["OPTIONS"] = params
    return entry


def hosts(entry: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(host, port) of each server a DATABASES entry names, in libpq's order ("" for a default).
    libpq pairs the lists by position; one port given for several hosts applies to each."""
    names = str(entry.get("HOST") or "").split(",")
    ports = str(entry.get("PORT") or "").split(",")
    if len(ports) == 1:
        ports = ports * len(names)
    if len(ports) != len(names):
        raise DatabaseUrlError(f"DATABASE_URL names {len(names)} hosts but {len(ports)} ports")
    return list(zip(names, ports, strict=True))


def is_local(entry: Mapping[str, Any]) -> bool:
    """Every server on this machine (loopback, or a Unix socket folder: a path)."""
    return all(host.lower() in LOCAL_HOSTS or host.startswith("/") for host, _ in hosts(entry))


def database_url(entry: Mapping[str, Any], *, dbname: str | None = None) -> str:
    """The URL of a DATABASES entry (`dbname` instead of its NAME when given): the inverse of
    `parse_database_url`, several hosts and the OPTIONS included, so a child process started with
    it reaches the same servers the same way."""
    userinfo = quote(str(entry.get("USER") or ""), safe="")
    if entry.get("PASSWORD"):
        userinfo += ":" + quote(str(entry["PASSWORD"]), safe="")
    netloc = ",".join(_netloc(host, port) for host, port in hosts(entry))
    query = urlencode({k: v for k, v in (entry.get("OPTIONS") or {}).items() if k not in _DJANGO_OPTIONS})
    name = quote(dbname if dbname is not None else str(entry.get("NAME") or ""), safe="")
    return f"postgres://{userinfo + '@' if userinfo else ''}{netloc}/{name}" + (f"?{query}" if query else "")


def _netloc(host: str, port: str) -> str:
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return quote(host, safe="[]:") + (f":{port}" if port else "")
