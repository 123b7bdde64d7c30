"""Writes to the inventory: GPU state derivation, host cordon/drain, moving GPUs between pools,
probing hosts again at once."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection, transaction
from django.db.models import QuerySet

from core.db.bulk import quoted_column
from inventory.choices import AdminState, GpuState, Health, HostState
from inventory.models import Gpu, Host, Pool, Source
from inventory.signals import inventory_changed


def gpu_state_sql(*, gpu: str, host_state: str, leased: str | None = None) -> str:
    """The one rule for a GPU's state, as a SQL expression for set-based writes. A vanished GPU
    or an offline host is offline; a held GPU shows leased even on a cordoned host (it is still in
    use); then health, foreign use, cordon. A NULL host state is neither offline nor cordoned.
    `gpu` is the alias of an inventory_gpu row, `host_state` an expression for its host's state,
    `leased` an expression to use instead of the row's own flag (e.g. "false" in an UPDATE that
    clears it). tests/allocation/test_sql_writes.py checks every combination."""
    def col(name: str) -> str:
        return f"{gpu}.{quoted_column(Gpu, name)}"

    def lit(value: str) -> str:
        assert "'" not in value  # choice values are identifiers
        return f"'{value}'"

    return (f"CASE WHEN {col('gone')} OR {host_state} = {lit(HostState.OFFLINE)} THEN {lit(GpuState.OFFLINE)} "
            f"WHEN {leased or col('leased')} THEN {lit(GpuState.LEASED)} "
            f"WHEN {col('health')} = {lit(Health.UNHEALTHY)} THEN {lit(GpuState.UNHEALTHY)} "
            f"WHEN {col('foreign')} THEN {lit(GpuState.FOREIGN)} "
            f"WHEN {host_state} IN ({lit(HostState.CORDONED)}, {lit(HostState.DRAINING)}) "
            f"THEN {lit(GpuState.CORDONED)} ELSE {lit(GpuState.FREE)} END")


def gpu_refresh_states(gpus: QuerySet[Gpu]) -> int:
    """Recompute and store `state` for the given GPUs; writes only rows that change.

    One UPDATE that derives each state from the row as it finds it (`gpu_state_sql`), not a read
    and a later write: a row a concurrent grant or release is writing is waited for
    and judged again on its committed version. A Python read-then-write here put a GPU granted
    between the two back to `cordoned` or `free` (the fault suite's storm caught it)."""
    ids_sql, params = gpus.values("pk").query.sql_with_params()
    table, hosts = connection.ops.quote_name(Gpu._meta.db_table), connection.ops.quote_name(Host._meta.db_table)
    state = gpu_state_sql(gpu="g", host_state=f"(SELECT h.state FROM {hosts} AS h WHERE h.id = g.host_id)")
    # Rows locked in id order first, as bulk_set does.
    locked = f"WITH locked AS MATERIALIZED (SELECT id FROM {table} WHERE id IN ({ids_sql}) ORDER BY id FOR UPDATE) "
    with connection.cursor() as cur:
        cur.execute(f"{locked}UPDATE {table} AS g SET state = {state} WHERE g.id IN (SELECT id FROM locked) "
                    f"AND g.state <> {state}", params)
        return int(cur.rowcount)


def _host_set_admin_state(*, host: Host, admin_state: str) -> Host:
    with transaction.atomic():
        # NO KEY UPDATE, not UPDATE: a grant committing a lease on this host checks its foreign
        # key with KEY SHARE at COMMIT, while holding the GPUs this cordon waits for; FOR UPDATE
        # would make that a deadlock. Freeing GPUs (FOR SHARE, allocation.lease_states) still waits.
        host = Host.objects.select_for_update(no_key=True).get(pk=host.pk)
        host.admin_state = admin_state
        host.state = Host.derive_state(host.reported_state, admin_state)
        host.save(update_fields=["admin_state", "state"])
        gpu_refresh_states(Gpu.objects.filter(host=host))
    inventory_changed.send(sender=Host, pool_ids=set(host.gpus.values_list("pool_id", flat=True)))
    return host


def host_cordon(*, host: Host) -> Host:
    """No new leases on this host; running ones continue."""
    return _host_set_admin_state(host=host, admin_state=AdminState.CORDONED)


def host_drain(*, host: Host) -> Host:
    """Cordon, and mark the host draining: allocation ends its leases (see allocation.services.admin)."""
    return _host_set_admin_state(host=host, admin_state=AdminState.DRAINING)


def host_uncordon(*, host: Host) -> Host:
    return _host_set_admin_state(host=host, admin_state=AdminState.NONE)


def hosts_probe_soon(*, source: Source) -> int:
    """End the backoff of the source's hosts: the next round probes them all (its entry changed, so
    an address or key that was wrong may be right now). Their failure counts stay: a host that
    still fails goes on where it was. Returns how many were backing off."""
    return Host.objects.filter(source=source, next_probe_at__isnull=False).update(next_probe_at=None)


def gpus_move(*, gpus: Iterable[Gpu], pool: Pool) -> int:
    """Move GPUs (with their MIG slices) to another pool. Leases keep running on them; the
    caller (allocation.services.capacity.capacity_move) decides about leases left over-limit."""
    ids = {g.pk for g in gpus}
    sources = set(Gpu.objects.filter(pk__in=ids).values_list("pool_id", flat=True))
    with transaction.atomic():
        moved = Gpu.objects.filter(pk__in=ids).exclude(pool=pool).update(pool=pool)
        moved += Gpu.objects.filter(parent_id__in=ids).exclude(pool=pool).update(pool=pool)
    inventory_changed.send(sender=Gpu, pool_ids=sources | {pool.pk})
    return moved
