"""The active GPU links with the lease each belongs to, in SQL whose cost follows the pool, not the
fleet nor the lease table's history: every scheduling pass reads the links of its pool's leases and
those on its GPUs in one statement, LINKS_SQL below (read by allocation/engine/snapshot.py).

Joined plainly, PostgreSQL hashed a seq scan of the whole lease table (every lease ever made:
5-40 ms a read by the end of bench/bench_kueue_baseline.py, and growing); looked up one link at a
time by primary key, 64,000 held GPUs cost 200 ms a read (bench/bench_scale.py engine). Read from
every active link of the fleet, a pass of one pool among 50 hashed the 50,000 links of all of them
(27 ms a read in bench/bench_scale.py scale-out, where the pool's own are 1,000: 2.6 ms now).

So each part starts from the pool and finds rows by key, `= ANY(ARRAY(...))`, which no estimate
turns into a scan of a whole table: the links of the pool's leases that hold GPUs (the state index)
or are still being ended (`ending_since` set: an ended lease keeps active links only then, the rule
the reaper's freeing relies on too; a partial index of those few), and the links of the pool's
leased GPUs that none of those holds (a lease of another pool holding a GPU moved here; usually
none), whose lease's pool is looked up by primary key. Where one pool is the whole fleet (64,000
GPUs, bench_scale.py engine) this costs 71 ms a read against 47 for the hash of every link: the
price of a read that does not grow with the other pools.
"""

from __future__ import annotations

from allocation.choices import HOLDING_STATES
from allocation.models import Lease, LeaseGpu

_LEASES, _LINKS = Lease._meta.db_table, LeaseGpu._meta.db_table
_HOLDING = ", ".join(f"'{state.value}'" for state in HOLDING_STATES)

# The pool's links and those on its GPUs: (lease id, GPU id, the lease's pool), parameter `pool`.
_OWN = f"""
SELECT lg.lease_id, lg.gpu_id FROM {_LINKS} lg WHERE lg.active AND lg.lease_id = ANY(
    ARRAY(SELECT h.id FROM {_LEASES} h WHERE h.pool_id = %(pool)s AND h.state IN ({_HOLDING}))
    || ARRAY(SELECT e.id FROM {_LEASES} e WHERE e.pool_id = %(pool)s AND e.ending_since IS NOT NULL))
"""
LINKS_SQL = f"""
WITH own AS MATERIALIZED ({_OWN})
SELECT o.lease_id::text, o.gpu_id, %(pool)s::int FROM own o
UNION ALL
SELECT lg.lease_id::text, lg.gpu_id, (SELECT x.pool_id FROM {_LEASES} x WHERE x.id = lg.lease_id)
FROM {_LINKS} lg
WHERE lg.active AND lg.gpu_id = ANY(ARRAY(
    SELECT g.id FROM inventory_gpu g WHERE g.pool_id = %(pool)s AND NOT g.gone AND g.leased
    AND NOT EXISTS (SELECT 1 FROM own o WHERE o.gpu_id = g.id)))
"""
