"""Stopping the workload of an ended lease: the record of attempts, the backoff, what is due.

A lease that ended while its workload may still run keeps its GPUs (`ending_since` set, its links
active) until the workload is confirmed stopped or an admin forgets it (the host is gone for
good: `allocation.services.admin.host_forget_workloads`). Nothing else frees them: a stop that
fails is retried with exponential backoff (5 s doubling to 5 min), for ever; a permanent error
(the host key changed, the host left the configuration) is retried slowly (every 30 min), since
an admin may repair it. Handing the GPUs out again while the old process still runs on them
would put two workloads on one GPU.

The record lives in the lease's `binding_status` (JSON, so no migration and no new state):

    state: "stopping"                     (then "stopped", or "forgotten")
    stop: {attempts, error, permanent, first_failed_at, last_attempt_at, next_attempt_at,
           attempting_until}

`attempting_until` claims an attempt in progress: a second worker (the sweep, a duplicate task)
leaves the lease alone until then. The lease JSON shows it as `stopping` (`stopping_view`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from allocation.choices import END_STATES
from allocation.models import WORKLOAD_MAY_RUN, Lease
from core.tasks import backoff_s

#: Retries after a failed stop: doubling from the first, capped (core.tasks.backoff_s: jitter on
#: the upper half, so that the leases of one dead host do not all come back in the same second).
BACKOFF_FIRST_S = 5.0
BACKOFF_MAX_S = 300.0
#: Retries after a permanent error: slow, but never none (an admin may fix the host key).
PERMANENT_RETRY_S = 1800.0
#: How long one attempt may take beyond the grace period before another worker may try: the
#: connection, the command and the KILL round (the SSH stop script's timeout is request + grace + 10).
ATTEMPT_BUDGET_S = 120.0
#: A bind started this long ago and never reported back is abandoned (its worker died): what it
#: may have started is stopped by name. Longer than the bind task's hard time limit (270 s).
BIND_ABANDONED_S = 300.0
#: The sweep re-asks for an attempt this long after it was due (the task's own countdown should
#: have run it: this is for messages lost with the broker or a killed worker).
SWEEP_SLACK_S = 10.0


def iso(moment: datetime) -> str:
    return moment.isoformat()


def parse(text: Any) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text))
    except ValueError:
        return None


def retry_delay_s(attempts: int, *, permanent: bool) -> float:
    """Seconds before the next attempt after `attempts` failed ones (1 or more)."""
    if permanent:
        return PERMANENT_RETRY_S
    return backoff_s(max(0, attempts - 1), base=BACKOFF_FIRST_S, cap=BACKOFF_MAX_S)


def claimed(status: Mapping[str, Any], now: datetime) -> bool:
    """Whether another worker's attempt is in progress (its claim has not run out)."""
    until = parse((status.get("stop") or {}).get("attempting_until"))
    return until is not None and until > now


def with_claim(status: Mapping[str, Any], now: datetime, grace_s: int) -> dict[str, Any]:
    stop = dict(status.get("stop") or {})
    stop["attempting_until"] = iso(now + timedelta(seconds=grace_s + ATTEMPT_BUDGET_S))
    return {**status, "state": "stopping", "stop": stop}


def with_failure(status: Mapping[str, Any], now: datetime, error: str, *,
                 permanent: bool) -> tuple[dict[str, Any], float, bool]:
    """The status after a failed attempt, the delay before the next, and whether this failure is
    news for the audit trail (the first, or another error than the last)."""
    stop = dict(status.get("stop") or {})
    attempts = int(stop.get("attempts") or 0) + 1
    delay = retry_delay_s(attempts, permanent=permanent)
    news = attempts == 1 or stop.get("error") != error or bool(stop.get("permanent")) != permanent
    stop.update(attempts=attempts, error=error, permanent=permanent, last_attempt_at=iso(now),
                next_attempt_at=iso(now + timedelta(seconds=delay)), attempting_until=None)
    stop.setdefault("first_failed_at", iso(now))
    return {**status, "state": "stopping", "stop": stop}, delay, news


def with_wait(status: Mapping[str, Any], until: datetime, why: str) -> dict[str, Any]:
    """The status while the stop waits for something else (a bind still in flight)."""
    stop = dict(status.get("stop") or {})
    stop.update(error=why, permanent=False, next_attempt_at=iso(until), attempting_until=None)
    return {**status, "state": "stopping", "stop": stop}


def with_stopped(status: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    stop = status.get("stop")
    done = {**status, "state": "stopped", "stopped_at": iso(now)}
    if stop:  # kept: how many attempts it took shows in the lease's history
        done["stop"] = {**stop, "attempting_until": None, "next_attempt_at": None}
    return done


def pending_stops() -> Any:
    """Ended leases still holding GPUs for a workload that may run (a handle, or a bind started)."""
    return (Lease.objects.filter(state__in=END_STATES, ending_since__isnull=False)
            .filter(WORKLOAD_MAY_RUN))


def stop_due(lease: Lease, now: datetime, *, host_seen_at: datetime | None = None) -> bool:
    """Whether the sweep should ask for an attempt now: the planned retry is overdue (its task
    was lost), or the host answered discovery since the last failure (it is back: try at once
    rather than wait out the backoff), or the first attempt never reported (its message lost)."""
    status = lease.binding_status or {}
    if claimed(status, now):
        return False
    stop = status.get("stop") or {}
    next_at = parse(stop.get("next_attempt_at"))
    last_at = parse(stop.get("last_attempt_at"))
    if next_at is None:
        since = lease.ending_since or now
        return (now - since).total_seconds() > lease.priority_class.grace_s + 30
    if now >= next_at + timedelta(seconds=SWEEP_SLACK_S):
        return True
    # Once per discovery that reached the host after the last failure: never more often.
    return host_seen_at is not None and last_at is not None and host_seen_at > last_at


def stopping_view(state: str, ending_since: datetime | None, status: Mapping[str, Any] | None,
                  when: Any) -> dict[str, Any] | None:
    """The lease JSON's `stopping`: null unless the lease ended and still holds its GPUs until its
    workload is stopped (or its preemption notice runs out). `when` renders a datetime."""
    if state not in END_STATES or ending_since is None:
        return None
    stop = (status or {}).get("stop") or {}
    return {
        "since": when(ending_since),
        "attempts": int(stop.get("attempts") or 0),
        "last_error": stop.get("error") or "",
        "permanent": bool(stop.get("permanent")),
        "last_attempt_at": stop.get("last_attempt_at"),
        "next_attempt_at": stop.get("next_attempt_at"),
    }


def describe_delay(seconds: float) -> str:
    if seconds < 90:
        return f"{math.ceil(seconds)} s"
    return f"{math.ceil(seconds / 60)} min"
