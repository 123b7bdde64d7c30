"""The active GPU links with the lease each belongs to, in SQL whose cost follows what runs, not
the lease table's history: every scheduling pass reads the links of its pool's leases and those
on its GPUs through it (allocation/engine/snapshot.py LINKS_SQL).

Joined plainly, PostgreSQL hashed a seq scan of the whole lease table (every lease ever made:
5-40 ms a read by the end of bench/bench_kueue_baseline.py, and growing); looked up one link at a
time by primary key, 64,000 held GPUs cost 200 ms a read (bench/bench_scale.py engine). Here the
running leases come through the lease table's state index (a hash of what runs), and the rare link
of a lease in another state (ending, or ended with its GPUs not yet released) is looked up by
primary key: `CASE` evaluates that subquery only for a link the join left unmatched.
"""

from __future__ import annotations

from allocation.choices import LeaseState
from allocation.models import Lease, LeaseGpu

_LEASES, _LINKS = Lease._meta.db_table, LeaseGpu._meta.db_table
_RUNNING = f"('{LeaseState.GRANTED.value}', '{LeaseState.BOUND.value}')"


def _column(name: str) -> str:
    """A column of the link's lease: from the running lease joined, else by primary key."""
    by_key = f"(SELECT x.{name} FROM {_LEASES} x WHERE x.id = lg.lease_id)"
    return f"CASE WHEN h.id IS NOT NULL THEN h.{name} ELSE {by_key} END"


def active_links(*columns: str) -> str:
    """SELECT lg.lease_id, lg.gpu_id and these columns of each active link's lease (as named)."""
    picked = "".join(f", {_column(c)} AS {c}" for c in columns)
    return (f"SELECT lg.lease_id, lg.gpu_id{picked} FROM {_LINKS} lg "
            f"LEFT JOIN {_LEASES} h ON h.id = lg.lease_id AND h.state IN {_RUNNING} WHERE lg.active")
