"""The lease events of a fault scenario, checked against the transactional outbox: after the run,
every committed transition's outbox row has been published (none lost), each outbox row is on the
stream once (no duplicate by event id), under the stream id its row records, and one lease's
events come in the order of its transitions.

Rows published before Redis lost its data (the Redis-outage scenario restarts it empty) or trimmed
by the stream's cap are older than the stream's first entry and are not looked for there.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from allocation.events import STREAM
from tests.faults.invariants import connect

#: A row published this long after its commit was left by its writer (killed, Redis away) to the
#: periodic relay (every second): the figure says how many the relay caught.
LEFT_TO_RELAY_S = 0.5


def _sid(text: str) -> tuple[int, int]:
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def _rows(url: str) -> list[tuple[int, str, str | None, float | None]]:
    conn = connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id, lease_id::text, stream_id, "
                        "EXTRACT(EPOCH FROM published_at - created_at) FROM allocation_leaseoutbox ORDER BY id")
            return [(int(i), lease, sid, None if lag is None else float(lag)) for i, lease, sid, lag in cur.fetchall()]
    finally:
        conn.close()


def check_events(url: str, client: Any, timeout: float = 15) -> dict[str, Any]:
    """Figures and findings of the lease events; `findings` is empty when none was lost or doubled."""
    deadline = time.monotonic() + timeout
    rows = _rows(url)
    while any(sid is None for _, _, sid, _ in rows) and time.monotonic() < deadline:
        time.sleep(0.5)  # the periodic relay publishes what writers left, every second
        rows = _rows(url)
    entries = [(i.decode(), {k.decode(): v.decode() for k, v in f.items()}) for i, f in client.xrange(STREAM)]
    seen = Counter(fields["event"] for _, fields in entries)
    at = {fields["event"]: sid for sid, fields in entries}
    first = _sid(entries[0][0]) if entries else None
    unpublished = [i for i, _, sid, _ in rows if sid is None]
    missing = [i for i, _, sid, _ in rows if sid and first and _sid(sid) >= first and at.get(str(i)) != sid]
    order: dict[str, list[int]] = {}
    for _, fields in entries:
        order.setdefault(fields["lease"], []).append(int(fields["event"]))
    out_of_order = [lease for lease, ids in order.items() if ids != sorted(ids)]
    findings = {"unpublished": unpublished[:10], "missing_from_stream": missing[:10],
                "duplicated": [e for e, n in seen.items() if n > 1][:10], "out_of_order": out_of_order[:10]}
    return {
        "outbox_rows": len(rows),
        "stream_entries": len(entries),
        "left_to_relay": sum(1 for *_, lag in rows if lag is not None and lag > LEFT_TO_RELAY_S),
        "findings": {k: v for k, v in findings.items() if v},
    }
