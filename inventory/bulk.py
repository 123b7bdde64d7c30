"""Fast bulk UPDATE for large fleets.

Django's `bulk_update` builds one `CASE WHEN id=… THEN …` per field and row and needs model
instances; for 16,000 GPUs that costs seconds in query compilation and object construction alone.
On PostgreSQL we send `UPDATE … FROM (VALUES …)` instead, from plain dicts or instances; other
databases fall back to `bulk_update`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db import connection, models

# Values of these field types go to psycopg2 as they are; others pass through get_db_prep_save.
_NATIVE = (models.IntegerField, models.FloatField, models.CharField, models.TextField,
           models.BooleanField, models.DateTimeField, models.ForeignKey, models.BigAutoField,
           models.AutoField)


def _get(row: Any, field: models.Field) -> Any:
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
    cols = [meta.get_field(name) for name in fields]
    if connection.vendor != "postgresql":
        objs = [r if isinstance(r, models.Model) else model(pk=r["pk"], **{
            f.attname: _get(r, f) for f in cols}) for r in rows]
        model.objects.bulk_update(objs, [f.name for f in cols], batch_size=1000)
        return len(rows)
    from psycopg2.extras import execute_values

    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(f.column)} = v.{quote(f.column)}" for f in cols)
    names = ", ".join(quote(c.column) for c in [pk, *cols])
    # Every placeholder is cast: VALUES infers types from the first row, where NULLs would be text.
    template = "(" + ", ".join(f"%s::{f.db_type(connection)}" for f in [pk, *cols]) + ")"
    sql = (f"UPDATE {quote(meta.db_table)} AS t SET {assignments} FROM (VALUES %s) AS v({names}) "
           f"WHERE t.{quote(pk.column)} = v.{quote(pk.column)}")
    native = [isinstance(f, _NATIVE) for f in cols]
    values: list[tuple[Any, ...]] = []
    for row in rows:
        key = row["pk"] if isinstance(row, Mapping) else row.pk
        values.append((pk.get_db_prep_save(key, connection), *(
            _get(row, f) if plain else f.get_db_prep_save(_get(row, f), connection)
            for f, plain in zip(cols, native, strict=True))))
    with connection.cursor() as cursor:
        execute_values(cursor.cursor, sql, values, template=template, page_size=page_size)
    return len(rows)
