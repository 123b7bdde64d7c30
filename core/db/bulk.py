"""Fast bulk UPDATE for large fleets.

Django's `bulk_update` builds one `CASE WHEN id=… THEN …` per field and row and needs model
instances; for 16,000 GPUs that costs seconds in query compilation and object construction alone.
We send `UPDATE … FROM (VALUES …)` instead, from plain dicts or instances, through Django's
cursor (so it is counted and logged like any query).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import connection, models
from django.db.models import Field

from core.db.statements import insert_fields

# Values of these field types go to psycopg2 as they are; others pass through get_db_prep_save.
_NATIVE = (models.IntegerField, models.FloatField, models.CharField, models.TextField,
           models.BooleanField, models.DateTimeField, models.ForeignKey, models.BigAutoField,
           models.AutoField)


def _fields(model: type[models.Model], names: Iterable[str]) -> list[Field[Any, Any]]:
    """The model's fields called `names`. TypeError for a reverse relation or a generic foreign
    key: they have no column to write."""
    fields = []
    for name in names:
        field = model._meta.get_field(name)
        if not isinstance(field, Field):
            raise TypeError(f"{model.__name__}.{name} has no column to write")
        fields.append(field)
    return fields


def _column(field: Field[Any, Any]) -> str:
    """The field's column, quoted for SQL."""
    if field.column is None:  # only fields without a column of their own (none come here)
        raise TypeError(f"{field} has no column")
    return connection.ops.quote_name(field.column)


def quoted_column(model: type[models.Model], name: str) -> str:
    """The column of the model's field `name`, quoted for SQL."""
    return _column(_fields(model, [name])[0])


def _get(row: Any, field: Field[Any, Any]) -> Any:
    if isinstance(row, Mapping):
        return row[field.attname] if field.attname in row else row[field.name]
    return getattr(row, field.attname)


def bulk_update_fast(model: type[models.Model], rows: Iterable[Any], fields: Sequence[str], *,
                     page_size: int = 2000) -> int:
    """Write `fields` of every row (model instances, or dicts keyed by field or attribute name,
    with "pk"). Returns the number of rows written."""
    rows = list(rows)
    if not rows:
        return 0
    meta = model._meta
    pk = meta.pk
    cols = _fields(model, fields)
    assignments = ", ".join(f"{_column(f)} = v.{_column(f)}" for f in cols)
    names = ", ".join(_column(c) for c in [pk, *cols])
    # Every placeholder is cast: VALUES infers types from the first row, where NULLs would be text.
    template = "(" + ", ".join(f"%s::{f.db_type(connection)}" for f in [pk, *cols]) + ")"
    sql = (f"UPDATE {connection.ops.quote_name(meta.db_table)} AS t SET {assignments} "
           f"FROM (VALUES %s) AS v({names}) WHERE t.{_column(pk)} = v.{_column(pk)}")
    native = [isinstance(f, _NATIVE) for f in cols]
    values: list[tuple[Any, ...]] = []
    for row in rows:
        key = row["pk"] if isinstance(row, Mapping) else row.pk
        values.append((pk.get_db_prep_save(key, connection), *(
            _get(row, f) if plain else f.get_db_prep_save(_get(row, f), connection)
            for f, plain in zip(cols, native, strict=True))))
    head, tail = sql.split("%s")
    with connection.cursor() as cursor:
        # Rows are bound client-side page by page (as psycopg2's execute_values does), then sent
        # through Django's cursor so the statement is counted and logged like any other query.
        for start in range(0, len(values), page_size):
            body = b",".join(cursor.cursor.mogrify(template, row) for row in values[start:start + page_size])
            cursor.execute(head + body.decode() + tail)
    return len(rows)


def _array_literal(values: Iterable[Any]) -> str:
    """A PostgreSQL array literal ('{1,"a b",NULL}') of already prepared values: one text
    parameter that the server parses in one go, where a Python list would be sent as
    ARRAY[…] with one expression per element to parse and cast."""
    values = list(values)
    kinds = set(map(type, values))
    if kinds == {int}:  # the common columns first, without a loop in Python
        return "{" + ",".join(map(str, values)) + "}"
    if kinds == {str} and '"' not in (joined := "".join(values)) and "\\" not in joined:
        return '{"' + '","'.join(values) + '"}'
    out = []
    for v in values:
        if v is None:
            out.append("NULL")
        elif isinstance(v, bool):
            out.append("t" if v else "f")
        elif isinstance(v, int):
            out.append(str(v))
        else:
            text = v.isoformat() if isinstance(v, datetime) else str(v)
            out.append('"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return "{" + ",".join(out) + "}"


def _array_params(fields: Sequence[Field[Any, Any]],
                  columns: Sequence[Sequence[Any]]) -> tuple[list[str], list[str]]:
    """One `%s::type[]` per field (for `unnest`), and each column as one array literal."""
    casts, params = [], []
    for f, column in zip(fields, columns, strict=True):
        casts.append(f"%s::{f.db_type(connection)}[]")
        if isinstance(f, models.JSONField):
            column = [None if v is None else json.dumps(v, cls=f.encoder) for v in column]
        elif not isinstance(f, (*_NATIVE, models.UUIDField)):
            column = [f.get_db_prep_save(v, connection) for v in column]
        params.append(_array_literal(column))
    return casts, params


def bulk_insert_columns(model: type[models.Model], fields: Sequence[str],
                        columns: Sequence[Sequence[Any]]) -> int:
    """INSERT rows given column by column (`columns[i]` holds every row's value of `fields[i]`,
    as the model would take it: dicts for JSON, str or UUID for UUIDs), in one statement
    (`INSERT … SELECT FROM unnest(arrays)`, parsed once whatever the row count). Returns the
    number of rows; no statement when there are none."""
    n = len(columns[0]) if columns else 0
    if not n:
        return 0
    _insert_unnest(model, fields, columns)
    return n


# One bulk_insert_columns: the model, its fields, and the values column by column.
Insert = tuple[type[models.Model], Sequence[str], Sequence[Sequence[Any]]]


def _unnest_sql(model: type[models.Model], fields: Sequence[str], columns: Sequence[Sequence[Any]],
                suffix: str = "") -> tuple[str, list[Any]]:
    cols = _fields(model, fields)
    casts, params = _array_params(cols, columns)
    names = ", ".join(_column(f) for f in cols)
    return (f"INSERT INTO {connection.ops.quote_name(model._meta.db_table)} ({names}) "
            f"SELECT * FROM unnest({', '.join(casts)}){suffix}", params)


def _insert_unnest(model: type[models.Model], fields: Sequence[str], columns: Sequence[Sequence[Any]],
                   suffix: str = "") -> list[tuple[Any, ...]]:
    sql, params = _unnest_sql(model, fields, columns, suffix)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description else []


def bulk_insert_together(inserts: Sequence[Insert]) -> int:
    """Several `bulk_insert_columns` in one statement, one round trip (data-modifying CTEs: each
    runs once, to completion, and none sees another's rows), for inserts that do not depend on
    each other; those of no rows are left out, and no statement for none. Returns the rows."""
    parts = [_unnest_sql(model, fields, columns) for model, fields, columns in inserts if columns and len(columns[0])]
    if not parts:
        return 0
    ctes = ", ".join(f"insert_{n} AS ({sql})" for n, (sql, _) in enumerate(parts[:-1]))
    with connection.cursor() as cursor:
        cursor.execute((f"WITH {ctes} " if ctes else "") + parts[-1][0], [p for _, ps in parts for p in ps])
    return sum(len(columns[0]) for _, _, columns in inserts if columns)


def bulk_insert_instances(objs: Sequence[models.Model], *, ignore_conflicts: bool = False) -> set[str]:
    """INSERT unsaved instances of one model as save() would write them (every concrete field
    through its `pre_save`, but an auto-increment key), in one `INSERT … SELECT FROM unnest`.
    With `ignore_conflicts`, rows a unique constraint keeps out are skipped (ON CONFLICT DO
    NOTHING). Returns the primary keys (as str) of the rows written; no statement for none."""
    if not objs:
        return set()
    meta = objs[0]._meta
    fields = insert_fields(meta)
    columns = [[f.pre_save(obj, True) for obj in objs] for f in fields]
    suffix = " ON CONFLICT DO NOTHING" if ignore_conflicts else ""
    rows = _insert_unnest(type(objs[0]), [f.name for f in fields], columns,
                          f"{suffix} RETURNING {_column(meta.pk)}::text")
    return {row[0] for row in rows}


def bulk_update_columns(model: type[models.Model], keys: Sequence[Any], fields: Sequence[str] = (),
                        columns: Sequence[Sequence[Any]] = (), *, same: Mapping[str, Any] | None = None,
                        only_if: Mapping[str, Any] | None = None) -> set[str]:
    """Set `fields` of the rows whose primary keys are `keys` (values column by column, as in
    `bulk_insert_columns`) and the fields of `same` to one value on every row, only on rows that
    also match `only_if` (field=value, checked by the UPDATE itself, so a row changed meanwhile by
    another transaction is left alone). Returns the keys (as str) of the rows written; no
    statement for no keys. One `UPDATE … FROM unnest(arrays)`."""
    return set(bulk_update_returning(model, keys, fields, columns, same=same, only_if=only_if))


def bulk_update_returning(model: type[models.Model], keys: Sequence[Any], fields: Sequence[str] = (),
                          columns: Sequence[Sequence[Any]] = (), *, same: Mapping[str, Any] | None = None,
                          only_if: Mapping[str, Any] | None = None, returning: str = "NULL") -> dict[str, Any]:
    """`bulk_update_columns`, returning for each row written (by key, as str) the value of the SQL
    expression `returning` over the row as written (alias `t`)."""
    if not keys:
        return {}
    meta = model._meta
    pk = meta.pk
    cols = _fields(model, fields)
    same = same or {}
    only_if = only_if or {}
    same_fields = list(zip(_fields(model, same), same.values(), strict=True))
    conditions = list(zip(_fields(model, only_if), only_if.values(), strict=True))
    casts, params = _array_params([pk, *cols], [keys, *columns])
    names = ", ".join(_column(f) for f in [pk, *cols])
    assignments = ", ".join([*(f"{_column(f)} = v.{_column(f)}" for f in cols),
                             *(f"{_column(f)} = %s" for f, _ in same_fields)])
    where = "".join(f" AND t.{_column(f)} = %s" for f, _ in conditions)
    sql = (f"UPDATE {connection.ops.quote_name(meta.db_table)} AS t SET {assignments} "
           f"FROM unnest({', '.join(casts)}) AS v({names}) "
           f"WHERE t.{_column(pk)} = v.{_column(pk)}{where} RETURNING t.{_column(pk)}::text, {returning}")
    prep = [f.get_db_prep_save(value, connection) for f, value in [*same_fields, *conditions]]
    with connection.cursor() as cursor:
        cursor.execute(sql, [*prep[:len(same_fields)], *params, *prep[len(same_fields):]])
        return dict(cursor.fetchall())


def bulk_set(model: type[models.Model], keys: Sequence[Any], **values: Any) -> int:
    """Set the same `values` on the rows whose primary keys are `keys`: one UPDATE, with the keys
    as one array parameter. Returns the number of rows; no statement for no keys."""
    if not keys:
        return 0
    meta = model._meta
    fields = _fields(model, values)
    assignments = ", ".join(f"{_column(f)} = %s" for f in fields)
    table, pk = connection.ops.quote_name(meta.db_table), _column(meta.pk)
    # Rows are locked in key order first: two writers of overlapping sets (a grant's GPUs, a
    # cordon's) then queue instead of deadlocking, as an UPDATE's own order is the scan's.
    with connection.cursor() as cursor:
        cursor.execute(f"WITH locked AS MATERIALIZED (SELECT {pk} FROM {table} "
                       f"WHERE {pk} = ANY(%s::{meta.pk.db_type(connection)}[]) ORDER BY {pk} FOR UPDATE) "
                       f"UPDATE {table} SET {assignments} WHERE {pk} IN (SELECT {pk} FROM locked)",
                       [_array_literal(keys),
                        *(f.get_db_prep_save(v, connection) for f, v in zip(fields, values.values(), strict=True))])
        return int(cursor.rowcount)
