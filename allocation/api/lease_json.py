"""Lease JSON without DRF's field machinery: the hot paths (create, read, release, list, watch)
render leases here, from values() rows or loaded instances, in at most two queries for any number
of leases (one for a single lease: allocation.selectors.lease_row). The output is exactly
LeaseSerializer's (same keys, order and formats; tests/api/test_lease_json.py compares the two),
which stays the schema of the OpenAPI document.

DRF's ModelSerializer costs ~40 µs a lease in per-field calls, on top of model instances of the
lease and the five rows it refers to; this costs ~5 µs a lease from a values() row.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from datetime import tzinfo
from typing import Any

from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone

from allocation.choices import END_STATES
from allocation.models import Lease, LeaseGpu, workload_exit_code
from allocation.selectors import as_lease_id, gpu_links_split, lease_list, lease_row, with_names
from allocation.workloads.stopping import stopping_view
from core.api.renderers import drf_datetime
from core.db.statements import compiled_values, execute
from inventory.models import Gpu

# The lease's own columns that its JSON shows; the names of what it refers to come from
# selectors.with_names (annotations), or from loaded relations (_RELATED).
COLUMNS = ("id", "state", "gpu_count", "model", "min_memory_mb", "min_driver_version", "min_cuda_version",
           "same_host", "selector", "topology", "borrowed", "requeue_on_loss", "ttl_seconds", "created_at",
           "granted_at", "expires_at", "ended_at", "reason", "pending_code", "queue_position", "estimated_start",
           "binding_kind", "binding_spec", "binding_status", "preempted_by_id", "warning", "idle_exempt",
           "ending_since")
_RELATED = {"team_name": ("team", "name"), "user_name": ("user", "username"), "pool_name": ("pool", "name"),
            "host_name": ("host", "name"), "priority_class_name": ("priority_class", "name")}


def _links(lease_ids: Sequence[Any]) -> dict[Any, tuple[list[str], list[bool]]]:
    """The GPU links of these leases (UUIDs and active flags, in the order the API lists them)."""
    out: dict[Any, tuple[list[str], list[bool]]] = {}
    # One array parameter instead of an IN list of a hundred: a fixed statement, prepared once
    # (core.db.statements.execute), where the ORM spent ~1 ms building the list.
    links, gpus = LeaseGpu._meta.db_table, Gpu._meta.db_table
    with connection.cursor() as cur:
        execute(cur, f"SELECT l.lease_id, g.uuid, l.active FROM {links} AS l JOIN {gpus} AS g ON g.id = l.gpu_id "
                     "WHERE l.lease_id = ANY(%s) ORDER BY g.host_id, g.index, l.id", [list(lease_ids)])
        rows = cur.fetchall()
    for lease_id, gpu_uuid, active in rows:
        uuids, actives = out.setdefault(lease_id, ([], []))
        uuids.append(gpu_uuid)
        actives.append(active)
    return out


def _render(row: dict[str, Any], uuids: Sequence[str], actives: Sequence[bool],
            tz: tzinfo | None = None) -> dict[str, Any]:
    """One lease, in LeaseSerializer's field order. An ended lease lists every GPU it held; an
    active one only those it holds now."""
    state = row["state"]
    ended = state in END_STATES
    spec = row["binding_spec"]
    tz = tz or timezone.get_current_timezone()
    when = (row["created_at"], row["granted_at"], row["expires_at"], row["ended_at"], row["estimated_start"])
    created, granted, expires, ended_at, estimated = (drf_datetime(t, tz) for t in when)
    preempted_by = row["preempted_by_id"]
    return {
        "id": str(row["id"]), "state": state, "team": row["team_name"], "user": row["user_name"],
        "pool": row["pool_name"], "gpu_count": row["gpu_count"],
        "gpus": [u for u, active in zip(uuids, actives, strict=True) if active or ended],
        "host": row["host_name"], "model": row["model"], "min_memory_mb": row["min_memory_mb"],
        "min_driver_version": row["min_driver_version"], "min_cuda_version": row["min_cuda_version"],
        "same_host": row["same_host"], "selector": row["selector"], "priority_class": row["priority_class_name"],
        "borrowed": row["borrowed"],
        "requeue_on_loss": row["requeue_on_loss"], "ttl_seconds": row["ttl_seconds"], "created_at": created,
        "granted_at": granted, "expires_at": expires, "ended_at": ended_at, "reason": row["reason"],
        "pending_code": row["pending_code"], "queue_position": row["queue_position"], "estimated_start": estimated,
        "binding": {"kind": row["binding_kind"], "spec": spec,
                    "status": row["binding_status"] or {"state": "waiting for grant"}} if spec else None,
        "preempted_by": str(preempted_by) if preempted_by is not None else None,
        "warning": row["warning"], "idle_exempt": row["idle_exempt"],
        "stopping": stopping_view(state, row["ending_since"], row["binding_status"], lambda t: drf_datetime(t, tz)),
        "exit_code": workload_exit_code(row["binding_status"]),
        "topology": row["topology"],
    }


def lease_etag(body: bytes) -> str:
    """The ETag of a lease's JSON as the API renders it (core.api.renderers.JSONRenderer): it
    changes with anything a client sees (state, reason, queue position, estimated start, binding
    status, expiry…). The long poll's `seen` compares with it."""
    return hashlib.sha256(body).hexdigest()[:24]


def lease_rows(queryset: QuerySet[Lease]) -> QuerySet[Any]:
    """values() rows of `queryset` with what renders them but the GPU links: COLUMNS and the
    names (with_names). One query, with no joins; `render_rows` reads the links of all the rows in
    one more (for many rows, one index scan is far cheaper than a `with_gpus` subquery a row)."""
    return with_names(queryset.values(*COLUMNS))


def render_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Lease JSON for `lease_rows` rows (for rows without their GPU links, one query reads
    those of all of them)."""
    missing = [row["id"] for row in rows if "gpu_link_pairs" not in row]
    links = _links(missing) if missing else {}
    tz = timezone.get_current_timezone()
    out = []
    for row in rows:
        pairs = row.get("gpu_link_pairs")
        uuids, actives = gpu_links_split(pairs) if pairs is not None else links.get(row["id"], ((), ()))
        out.append(_render(row, uuids, actives, tz))
    return out


def lease_dicts(lease_ids: Iterable[Any], *, visible_to: Any = None) -> list[dict[str, Any]]:
    """Lease JSON for `lease_ids`, in their order; ids that do not exist (or, with `visible_to`,
    that this user may not see) are left out. Two queries (the rows, their GPU links), one for a
    single id, none for an empty list."""
    ids = [i for i in map(as_lease_id, lease_ids) if i is not None]
    if not ids:
        return []
    if len(ids) == 1:  # GET leases/{id}/: the read compiled once per process
        row = lease_row(ids[0], visible_to=visible_to)
        return render_rows([row]) if row is not None else []
    if visible_to is None:  # the watch feed's read of each batch of changes, compiled once per process
        found = compiled_values("lease_rows_by_ids", _rows_by_ids, ids=",".join(i.hex for i in ids))
    else:
        found = list(lease_rows(lease_list(user=visible_to, related=False).filter(pk__in=ids).order_by()))
    rows = {row["id"]: row for row in found}
    return render_rows([rows[i] for i in ids if i in rows])


def _rows_by_ids(ids: str) -> QuerySet[Any]:
    """`lease_rows` of the leases whose ids are listed in `ids` (hex, comma-separated): one text
    parameter, so that the query compiles once (core.db.statements.compiled_values) whatever the
    number of ids, where building it with the ORM cost every feed batch ~1 ms of CPU."""
    table = connection.ops.quote_name(Lease._meta.db_table)
    return lease_rows(Lease.objects.extra(where=[f"{table}.\"id\" = ANY(string_to_array(%s, ',')::uuid[])"],
                                          params=[ids]).order_by())


def lease_dict(lease: Lease, gpus: Sequence[str] | None = None) -> dict[str, Any]:
    """Lease JSON for a loaded instance, annotated by `with_names` or with its team, user, pool,
    priority class and host loaded (select_related, or set by the service that made it). Its GPUs
    come from `gpus` (as listed), else from a `with_gpus` annotation, else from one query."""
    row = {name: getattr(lease, name) for name in COLUMNS}
    for name, (relation, attr) in _RELATED.items():
        if hasattr(lease, name):
            row[name] = getattr(lease, name)
        else:
            related = getattr(lease, relation)
            row[name] = getattr(related, attr) if related is not None else None
    if gpus is not None:
        return _render(row, gpus, [True] * len(gpus))
    links = getattr(lease, "gpu_link_pairs", None)  # set by selectors.with_gpus
    if links is not None:
        return _render(row, *gpu_links_split(links))
    return render_rows([row])[0]


