"""Several writes in one statement: PostgreSQL's data-modifying CTEs.

A lease request or release touches four or five tables; as separate statements that is a round
trip (and a query to plan) each, inside BEGIN … COMMIT. Joined into one `WITH a AS (…), b AS (…) …`
statement it is one round trip, atomic by itself. Rows are written exactly as Model.save() would
write them (every concrete field, through its own `pre_save` and `get_db_prep_save`), so callers
keep building model instances with the ordinary state-machine code and only the writing changes.
Callers check `one_statement_writes()` and fall back to save() elsewhere (SQLite has no
data-modifying CTEs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection, models

Statement = tuple[str, list[Any]]


def one_statement_writes() -> bool:
    return connection.vendor == "postgresql"


def _quote(name: str) -> str:
    return connection.ops.quote_name(name)


def insert_sql(obj: models.Model, *, source: str | None = None, ignore_conflicts: bool = False,
               returning: str | None = None) -> Statement:
    """INSERT of one instance, every concrete field but an auto-increment key. With `source`
    (a CTE name), the row is inserted once per row of that CTE: none when it is empty."""
    meta = obj._meta
    fields = [f for f in meta.concrete_fields if f is not meta.auto_field]
    params = [f.get_db_prep_save(f.pre_save(obj, True), connection) for f in fields]
    placeholders = ", ".join(["%s"] * len(fields))
    values = f"SELECT {placeholders} FROM {_quote(source)}" if source else f"VALUES ({placeholders})"
    sql = f"INSERT INTO {_quote(meta.db_table)} ({', '.join(_quote(f.column) for f in fields)}) {values}"
    if ignore_conflicts:
        sql += " ON CONFLICT DO NOTHING"
    if returning:
        sql += f" RETURNING {_quote(returning)}"
    return sql, params


def update_sql(obj: models.Model) -> Statement:
    """UPDATE of every concrete field of one instance, by primary key (what save() writes)."""
    meta = obj._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    params = [f.get_db_prep_save(f.pre_save(obj, False), connection) for f in fields]
    assignments = ", ".join(f"{_quote(f.column)} = %s" for f in fields)
    pk = meta.pk
    params.append(pk.get_db_prep_value(obj.pk, connection))
    return f"UPDATE {_quote(meta.db_table)} SET {assignments} WHERE {_quote(pk.column)} = %s", params


def execute_as_one(ctes: Sequence[tuple[str, Statement]], final: Statement = ("SELECT 1", [])) -> list[tuple[Any, ...]]:
    """Run `WITH name AS (statement), … final` as one statement; returns the rows of `final`.
    Every CTE runs exactly once, to completion, whether `final` reads it or not; all of them see
    the database as it was before the statement (a CTE reads another's rows only through RETURNING)."""
    parts = [f"{_quote(name)} AS ({sql})" for name, (sql, _) in ctes]
    params = [p for _, (_, ps) in ctes for p in ps] + list(final[1])
    sql = ("WITH " + ", ".join(parts) + " " if parts else "") + final[0]
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return list(cur.fetchall()) if cur.description else []
