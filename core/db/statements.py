"""Several writes in one statement: PostgreSQL's data-modifying CTEs.

A lease request or release touches four or five tables; as separate statements that is a round
trip (and a query to plan) each, inside BEGIN … COMMIT. Joined into one `WITH a AS (…), b AS (…) …`
statement it is one round trip, atomic by itself. Rows are written exactly as Model.save() would
write them (every concrete field, through its own `pre_save` and `get_db_prep_save`), so callers
keep building model instances with the ordinary state-machine code and only the writing changes.
"""

from __future__ import annotations

import hashlib
import re
import threading
import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.models import NOT_PROVIDED, QuerySet

Statement = tuple[str, list[Any]]
_lock = threading.Lock()


def _quote(name: str | None) -> str:
    if name is None:  # a field without a column (a many-to-many): never part of these statements
        raise ValueError("no column to name")
    return connection.ops.quote_name(name)


def _database() -> Any:
    """This thread's connection itself: `connection` is a proxy that looks it up again on every
    attribute (asgiref's Local), and each field's get_db_prep_save reads several attributes; a
    lease request writes ~40 fields, ~300 look-ups (0.5 ms of CPU) through the proxy."""
    return connections[DEFAULT_DB_ALIAS]


# The SQL text of a model's INSERT or UPDATE depends on the model and the options only: built once.
_texts: dict[tuple[Any, ...], str] = {}
_updates: dict[tuple[Any, ...], tuple[list[Any], str]] = {}  # UPDATE: its fields, and its text


def insert_fields(meta: Any) -> list[Any]:
    """The fields an INSERT writes: every concrete one but an auto-increment key and the columns
    the database fills itself (`db_default`)."""
    return [f for f in meta.concrete_fields if f is not meta.auto_field and f.db_default is NOT_PROVIDED]


def _insert_text(model: type[models.Model], source: str | None, ignore_conflicts: bool, returning: str | None) -> str:
    key = ("insert", model, source, ignore_conflicts, returning)
    sql = _texts.get(key)
    if sql is None:
        meta = model._meta
        fields = insert_fields(meta)
        placeholders = ", ".join(["%s"] * len(fields))
        values = f"SELECT {placeholders} FROM {_quote(source)}" if source else f"VALUES ({placeholders})"
        sql = f"INSERT INTO {_quote(meta.db_table)} ({', '.join(_quote(f.column) for f in fields)}) {values}"
        if ignore_conflicts:
            sql += " ON CONFLICT DO NOTHING"
        if returning:
            sql += f" RETURNING {_quote(returning)}"
        _texts[key] = sql
    return sql


def insert_sql(obj: models.Model, *, source: str | None = None, ignore_conflicts: bool = False,
               returning: str | None = None) -> Statement:
    """INSERT of one instance, every concrete field but an auto-increment key. With `source`
    (a CTE name), the row is inserted once per row of that CTE: none when it is empty."""
    db = _database()
    params = [f.get_db_prep_save(f.pre_save(obj, True), db) for f in insert_fields(obj._meta)]
    return _insert_text(type(obj), source, ignore_conflicts, returning), params


def update_sql(obj: models.Model, fields: Sequence[str] | None = None) -> Statement:
    """UPDATE of one instance by primary key: of every concrete field (what save() writes), or of
    `fields` only (what save(update_fields=…) writes), each through its own get_db_prep_save."""
    meta, db = obj._meta, _database()
    key = ("update", type(obj), tuple(fields) if fields is not None else None)
    pk = meta.pk
    assert pk is not None
    built = _updates.get(key)
    if built is None:  # the fields and the text depend on the model and `fields` only: built once
        chosen = [f for f in meta.concrete_fields if not f.primary_key and (fields is None or f.name in fields)]
        assert fields is None or len(chosen) == len(set(fields)), f"not concrete fields of {meta.label}: {fields}"
        assignments = ", ".join(f"{_quote(f.column)} = %s" for f in chosen)
        text = f"UPDATE {_quote(meta.db_table)} SET {assignments} WHERE {_quote(pk.column)} = %s"
        built = _updates[key] = (chosen, text)
    chosen, sql = built
    params = [f.get_db_prep_save(f.pre_save(obj, False), db) for f in chosen]
    params.append(pk.get_db_prep_value(obj.pk, db))
    return sql, params


def execute_as_one(ctes: Sequence[tuple[str, Statement]], final: Statement = ("SELECT 1", []), *,
                   before: Statement | None = None, generic: bool = False) -> list[tuple[Any, ...]]:
    """Run `WITH name AS (statement), … final` as one statement; returns the rows of `final`.
    Every CTE runs exactly once, to completion, whether `final` reads it or not; all of them see
    the database as it was before the statement (a CTE reads another's rows only through RETURNING).

    `before`: a statement sent ahead of it in the same round trip and the same transaction
    (`execute`), typically a lock: the statement then sees what was committed until the lock was
    held, which a lock taken inside it would not (its snapshot is taken when it starts).
    `generic`: see `execute`."""
    parts = [f"{_quote(name)} AS ({sql})" for name, (sql, _) in ctes]
    params = [p for _, (_, ps) in ctes for p in ps] + list(final[1])
    sql = ("WITH " + ", ".join(parts) + " " if parts else "") + final[0]
    with connection.cursor() as cur:
        execute(cur, sql, params, before=before, generic=generic)
        return list(cur.fetchall()) if cur.description else []


# --- server-side prepared statements -------------------------------------------------------------

MAX_PREPARED = 64  # per database connection; past it statements run unprepared
# Per database session (psycopg2 connection): statement → prepared name, and the uncertain ones.
_sessions: weakref.WeakKeyDictionary[Any, tuple[dict[str, str], set[str]]] = weakref.WeakKeyDictionary()
_PLACEHOLDER = re.compile(r"%%|%s")


# What `generic` sends ahead of a prepared statement's EXECUTE, in the same message.
GENERIC: Statement = ("SET LOCAL plan_cache_mode = force_generic_plan", [])


def execute(cur: Any, sql: str, params: Sequence[Any], *, before: Statement | None = None,
            generic: bool = False) -> None:
    """cur.execute(sql, params), as a prepared statement (GPUPOOL["PREPARED_STATEMENTS"],
    default on): PostgreSQL then parses and plans it once per connection instead of every time,
    which is most of its cost for the small statements of the hot lease requests (~0.3 ms of
    ~0.35 ms for a lease read). The first use on a connection sends PREPARE and EXECUTE together
    (one round trip). Prepared statements live as long as the session: turn them off behind a
    pooler in transaction mode (PgBouncer), which hands sessions around.

    `before` (a statement, unprepared) goes first in the same message: several statements in one
    simple query run as one transaction (PostgreSQL's implicit transaction block, or the caller's
    open one), each with its own snapshot; the rows are `sql`'s.

    `generic` (inside a transaction): plan it once a session, for any values. PostgreSQL plans a
    prepared statement anew at each execution while a plan made for the values looks cheaper than
    its generic plan; the release's ten-part statement was planned so at every release in a Kueue
    run (2.3 ms a call, 27 s of PostgreSQL's ~155 s of CPU: pg_stat_statements, track_planning).
    For a statement whose generic plan is checked (tests/allocation/test_release_plan.py); others
    keep PostgreSQL's choice (forced on every statement, the locked lease read's generic plan read
    94 pages against 14). SET LOCAL: it ends with the transaction."""
    prepare = settings.GPUPOOL.get("PREPARED_STATEMENTS", True)
    if generic and prepare:  # (an unprepared statement is planned for its values anyway)
        before = (f"{GENERIC[0]}; {before[0]}", list(before[1])) if before is not None else GENERIC
    head, head_params = (f"{before[0]}; ", list(before[1])) if before is not None else ("", [])
    if not prepare:
        cur.execute(head + sql, [*head_params, *params])
        return
    raw = connection.connection  # this thread's session (`connection` is a proxy shared by all)
    state = _sessions.get(raw)
    if state is None:  # a new session: nothing is prepared in it yet
        with _lock:
            state = _sessions[raw] = ({}, set())
    prepared: dict[str, str] = state[0]
    uncertain: set[str] = state[1]  # PREPAREs sent with an EXECUTE that failed
    args = f"({', '.join(['%s'] * len(params))})" if params else ""
    name = prepared.get(sql)
    if name is None and len(prepared) >= MAX_PREPARED:
        cur.execute(head + sql, [*head_params, *params])
        return
    if name is None:
        name = statement_name(sql)
        if sql in uncertain:  # PREPARE is not undone by a rollback: it may exist or not
            uncertain.discard(sql)
            cur.execute("SELECT 1 FROM pg_prepared_statements WHERE name = %s", [name])
            if cur.fetchone() is not None:
                prepared[sql] = name
    if sql in prepared:
        cur.execute(f"{head}EXECUTE {name}{args}", [*head_params, *params])
        return
    numbers = iter(range(1, len(params) + 1))
    body = _PLACEHOLDER.sub(lambda m: m.group() if m.group() == "%%" else f"${next(numbers)}", sql)
    try:
        cur.execute(f"{head}PREPARE {name} AS {body}; EXECUTE {name}{args}", [*head_params, *params])
    except Exception:
        uncertain.add(sql)
        raise
    prepared[sql] = name


def statement_name(sql: str) -> str:
    """The name `execute` prepares `sql` under (the same in every session)."""
    return f"gpupool_{hashlib.sha1(sql.encode()).hexdigest()[:16]}"


_NAMED = re.compile(r"%%|%\((\w+)\)s")
_positional: dict[str, tuple[str, tuple[str, ...]]] = {}


def positional(sql: str) -> tuple[str, tuple[str, ...]]:
    """`sql` written with named placeholders (`%(pool)s`) as positional ones (`%s`), and the
    names in their order; cached per text."""
    hit = _positional.get(sql)
    if hit is None:
        names: list[str] = []

        def one(match: re.Match[str]) -> str:
            if match.group(1) is None:
                return match.group()
            names.append(match.group(1))
            return "%s"

        hit = (_NAMED.sub(one, sql), tuple(names))
        with _lock:
            _positional[sql] = hit
    return hit


def execute_named(cur: Any, sql: str, params: dict[str, Any]) -> None:
    """`execute` for a statement written with named placeholders, as the pass's reads are:
    prepared like any other. The pass's dozen fixed reads were parsed and planned at every pass
    (~2 s of PostgreSQL's planning in a Kueue run: pg_stat_statements)."""
    text, order = positional(sql)
    execute(cur, text, [params[name] for name in order])


# --- compiled once, run many times ---------------------------------------------------------------

@dataclass(frozen=True)
class _Template:
    sql: str
    params: tuple[Any, ...]
    slots: tuple[tuple[int, str, bool], ...]  # (position in params, value name, as hex UUID)
    names: tuple[str, ...]
    converters: tuple[tuple[int, tuple[Any, ...], Any], ...]


_templates: dict[tuple[Any, ...], _Template | None] = {}


def _sentinel(name: str, value: Any, n: int) -> Any:
    """A stand-in no real value equals, of the type of `value`."""
    if isinstance(value, str):
        return f"\x1fsentinel:{name}\x1f"
    if isinstance(value, uuid.UUID):
        return uuid.UUID(int=0x5E_7171E1 << 64 | n)
    return -1_999_999_000 - n  # an int (bool and None never get here: they are part of the key)


def _compile(build: Callable[..., QuerySet[Any]], values: dict[str, Any]) -> _Template | None:
    stand_ins = {name: _sentinel(name, v, n) for n, (name, v) in enumerate(values.items())
                 if isinstance(v, str | uuid.UUID) or (isinstance(v, int) and not isinstance(v, bool))}
    queryset = build(**{**values, **stand_ins})
    compiler = queryset.query.get_compiler(queryset.db)
    sql, params = compiler.as_sql()
    slots = []
    for i, param in enumerate(params):
        for name, stand_in in stand_ins.items():
            if param == stand_in or (isinstance(stand_in, uuid.UUID) and param == stand_in.hex):
                slots.append((i, name, param != stand_in))
    if {name for _, name, _ in slots} != set(stand_ins) or any(str(v) in sql for v in stand_ins.values()):
        return None  # a value went into the SQL text, or nowhere: this query is not reusable
    query = queryset.query
    # The row's column order, as Django's ValuesIterable reads it: values() keeps its arguments'
    # order (Query.selected) since Django 5.2, annotations among them included.
    names = tuple(query.selected) if query.selected else (
        *query.extra_select, *query.values_select, *query.annotation_select)
    converters = compiler.get_converters([s[0] for s in compiler.select[:compiler.col_count]])
    return _Template(sql, tuple(params), tuple(slots), names,
                     tuple((pos, tuple(convs), expr) for pos, (convs, expr) in converters.items()))


def compiled_values(key: str, build: Callable[..., QuerySet[Any]], **values: Any) -> list[dict[str, Any]]:
    """The rows of the values() queryset `build(**values)`, as `list(build(**values))` gives them;
    but the queryset is built and compiled to SQL once per process, database and `key`, and then
    only run with new parameters. Building and compiling a query with a few subqueries costs the
    ORM ~1 ms of CPU, several times what PostgreSQL takes to plan and run it.

    `build` must give the same query for any values of the same types (str, int, UUID); None,
    booleans and other values are part of the cache key, so they may change its shape. A query
    whose values cannot be traced to its parameters is run uncompiled, every time."""
    shape = tuple((name, v if v is None or isinstance(v, bool) or not isinstance(v, str | int | uuid.UUID)
                   else type(v).__name__) for name, v in values.items())
    cache_key = (key, connection.alias, shape)
    if cache_key not in _templates:
        template = _compile(build, values)
        with _lock:
            _templates[cache_key] = template
    template = _templates[cache_key]
    if template is None:
        return list(build(**values))
    params = list(template.params)
    for i, name, as_hex in template.slots:
        params[i] = values[name].hex if as_hex else values[name]
    with connection.cursor() as cur:
        execute(cur, template.sql, params)
        rows = cur.fetchall()
    names = template.names
    out = []
    for row in rows:
        row = list(row)
        for pos, convs, expression in template.converters:
            value = row[pos]
            for convert in convs:
                value = convert(value, expression, connection)
            row[pos] = value
        out.append(dict(zip(names, row, strict=True)))
    return out
