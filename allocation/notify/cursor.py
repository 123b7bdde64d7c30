"""The notification dispatcher's place in the outbox of lease events (`NotificationCursor`).

Outbox rows are read in the order of (the transaction that wrote them, id), and only once every
transaction older than theirs has ended, committed or rolled back: the `horizon`, the oldest
transaction still running other than this one (`pg_snapshot_xip` leaves this one out), or the next
to start when none runs. Below it, a transaction's rows are all visible or gone for good, so the
cursor never passes a row that commits later. Every database of the server shares these
transaction ids, but a transaction that `pg_stat_activity` shows running in another database
cannot write this one's outbox, so it does not count (a migration or a batch job in another
database of a shared server held every notification back until it ended). Where that view hides
other sessions (a role without pg_read_all_stats), every transaction counts, as before.

What it costs: an event waits for the transactions older than its own, which on a busy server are
milliseconds; a transaction of this database left open for minutes (an idle session in a
transaction) holds notifications back for as long, and none is lost.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection

from allocation.models import LeaseOutbox, NotificationCursor

# The oldest transaction running but this one: the least of the snapshot's in-progress list, or
# its xmax (1 + the latest ended) when the list is empty. This one's own rows are visible to it;
# they count as below the horizon when it is that xmax itself (so nothing older runs), as in a
# test's one transaction. Left out of the list: the transactions pg_stat_activity shows in another
# database (or none), matched on the 32 low bits (an xid8's xid). Only those seen elsewhere are
# left out, never those not seen here: one of this database that ended between the snapshot and
# the view's read (its rows invisible to this statement) still holds the horizon, so the cursor
# never passes its rows.
_OTHER_DATABASES = """SELECT a.backend_xid::text::bigint FROM pg_stat_activity AS a
  WHERE a.backend_xid IS NOT NULL AND a.datname IS DISTINCT FROM current_database()"""
_HORIZON = f"""(SELECT CASE WHEN h.own = h.xact THEN h.own + 1 ELSE h.xact END FROM (
  SELECT COALESCE((SELECT min(x::text::bigint) FROM pg_snapshot_xip(s) AS x
                   WHERE mod(x::text::bigint, 4294967296) NOT IN ({_OTHER_DATABASES})),
                  pg_snapshot_xmax(s)::text::bigint) AS xact,
         pg_current_xact_id_if_assigned()::text::bigint AS own
  FROM pg_current_snapshot() AS s) AS h)"""


def _tables() -> tuple[str, str]:
    quote = connection.ops.quote_name
    return quote(LeaseOutbox._meta.db_table), quote(NotificationCursor._meta.db_table)


def position_sql() -> str:
    """The cursor as a row constructor `(xact, outbox_id)`, to compare with `(o.xact, o.id)` (an
    index range on lease_outbox_xact): (0, 0), before every row, when there is no cursor row (a
    database flushed by a test)."""
    cursor = _tables()[1]
    return "(" + ", ".join(f"(SELECT COALESCE(max({column}), 0) FROM {cursor} WHERE id = 1)"
                           for column in ("xact", "outbox_id")) + ")"


def after_cursor(cur: Any, limit: int) -> list[tuple[Any, ...]]:
    """Up to `limit` outbox rows after the cursor and below the horizon, in (xact, id) order:
    (id, lease, state, committed at, xact). One statement, so the horizon and the rows are of one
    snapshot."""
    cur.execute(f"SELECT o.id, o.lease_id, o.state, o.created_at, o.xact FROM {_tables()[0]} AS o "
                f"WHERE (o.xact, o.id) > {position_sql()} AND o.xact < {_HORIZON} ORDER BY o.xact, o.id LIMIT %s",
                [limit])
    return list(cur.fetchall())


def cursor_move(cur: Any, last: tuple[Any, ...], now: datetime) -> None:
    """Put the cursor at `last`, the last row `after_cursor` returned (in the reader's transaction)."""
    cursor = _tables()[1]
    cur.execute(f"INSERT INTO {cursor} (id, xact, outbox_id, moved_at) VALUES (1, %s, %s, %s) "
                "ON CONFLICT (id) DO UPDATE SET xact = EXCLUDED.xact, outbox_id = EXCLUDED.outbox_id, "
                "moved_at = EXCLUDED.moved_at", [last[4], last[0], now])
