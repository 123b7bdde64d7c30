"""The active GPU links with the lease each belongs to, in SQL whose cost follows what runs, not
the lease table's history: every scheduling pass reads the links of its pool's leases and those
on its GPUs in one statement, LINKS_SQL below (read by allocation/engine/snapshot.py).

Joined plainly, PostgreSQL hashed a seq scan of the whole lease table (every lease ever made:
5-40 ms a read by the end of bench/bench_kueue_baseline.py, and growing); looked up one link at a
time by primary key, 64,000 held GPUs cost 200 ms a read (bench/bench_scale.py engine). Here the
running leases come through the lease table's state index (a hash of what runs), and the rare link
of a lease in another state (ending, or ended with its GPUs not yet released) is looked up by
primary key: `CASE` evaluates that subquery only for a link the join left unmatched.
"""

from __future__ import annotations

from allocation.choices import HOLDING_STATES
from allocation.models import Lease, LeaseGpu

_LEASES, _LINKS = Lease._meta.db_table, LeaseGpu._meta.db_table
_HOLDING = ", ".join(f"'{state.value}'" for state in HOLDING_STATES)

# The pool's links and those on its GPUs: (lease id, GPU id, the lease's pool), parameter `pool`.
LINKS_SQL = f"""
SELECT a.lease_id::text, a.gpu_id, a.pool_id FROM (
    SELECT lg.lease_id, lg.gpu_id, CASE WHEN h.id IS NOT NULL THEN h.pool_id
        ELSE (SELECT x.pool_id FROM {_LEASES} x WHERE x.id = lg.lease_id) END AS pool_id
    FROM {_LINKS} lg LEFT JOIN {_LEASES} h ON h.id = lg.lease_id AND h.state IN ({_HOLDING})
    WHERE lg.active) a
WHERE a.pool_id = %(pool)s OR a.gpu_id IN (SELECT g.id FROM inventory_gpu g WHERE g.pool_id = %(pool)s AND NOT g.gone)
"""
