"""Cordon, drain or uncordon many hosts at once, as previewed (`allocation.selectors.host_bulk_preview`).

The one write for the dashboard's bulk bar and the API's `hosts/bulk/`: the preview is recomputed
under the scheduling locks of every pool the hosts' GPUs are in (so no pass grants on them in
between), compared with the fingerprint the admin confirmed, and each host is then changed by the
single-host service (`host_admin_action`), audited per host exactly as a single action is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction

from allocation.engine import lock_pool
from allocation.selectors.host_bulk_preview import BulkPreview, hosts_bulk_preview
from allocation.services.admin import host_admin_action
from core.errors import Conflict, DomainError
from inventory.models import Gpu, Host


@dataclass(frozen=True)
class BulkResult:
    changed: tuple[str, ...]  # host names, in name order
    preview: BulkPreview


def hosts_bulk_action(*, host_ids: Sequence[int], verb: str, actor: str, fingerprint: str = "") -> BulkResult:
    """`verb` on every host of `host_ids` that is not already so, as previewed.

    Raises Conflict `preview_stale` (nothing changed) when `fingerprint` is given and the change
    would now do something else than that preview said; DomainError `nothing_to_change` when every
    host already is so."""
    pool_ids = set(Gpu.objects.filter(host_id__in=list(host_ids)).values_list("pool_id", flat=True).distinct())
    with transaction.atomic():
        for pool_id in sorted(pool_ids):  # id order, as capacity moves take them: never a deadlock
            lock_pool(pool_id)
        preview = hosts_bulk_preview(host_ids=host_ids, verb=verb, next_pass=bool(fingerprint))
        if fingerprint and fingerprint != preview.fingerprint:
            raise Conflict("the hosts or their leases changed since the preview; review the new preview",
                           code="preview_stale", details={"fingerprint": [
                               "no longer matches what the change would do; preview it again"]})
        if not preview.changing:
            raise DomainError(f"nothing to change: every host is already {verb}ed", code="nothing_to_change")
        changed = []
        for host in Host.objects.filter(pk__in=[h.host_id for h in preview.changing]).order_by("name", "pk"):
            host_admin_action(host=host, verb=verb, actor=actor)
            changed.append(host.name)
    return BulkResult(changed=tuple(changed), preview=preview)
