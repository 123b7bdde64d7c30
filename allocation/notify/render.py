"""What a notification says: one `Event` (built by the dispatcher from committed rows) rendered as
the JSON body every target of it gets (webhook body, e-mail text), with a human `message` and a
Slack-compatible `text` (Slack's incoming webhooks read `text` and ignore the other keys)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from allocation.models import Lease
from allocation.notify_vocabulary import BUDGET, EXPIRING, GRANTED, IDLE, LOST, PREEMPTED

ICONS = {GRANTED: ":white_check_mark:", EXPIRING: ":hourglass_flowing_sand:", PREEMPTED: ":warning:",
         LOST: ":x:", BUDGET: ":moneybag:", IDLE: ":zzz:"}


@dataclass
class Event:
    """One event as its targets hear of it. `key` is its id (`X-Gpupool-Event`), the same for every
    target; `lease` the lease row it is about (None for a budget); `user_id` the lease's owner."""

    name: str
    key: str
    occurred_at: datetime
    team: str
    team_id: int | None
    pool: str
    message: str
    lease: Lease | None = None
    user_id: int | None = None
    waited_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def body(self, delivery_id: str) -> dict[str, Any]:
        """The JSON body of one delivery of this event."""
        return {"event": self.name, "event_id": self.key, "delivery_id": delivery_id,
                "occurred_at": _iso(self.occurred_at), "team": self.team, "pool": self.pool,
                "lease": lease_summary(self.lease) if self.lease is not None else None,
                **self.extra, "message": self.message,
                "text": f"{ICONS[self.name]} *gpupool {self.name}*: {self.message}"}


def _iso(when: datetime | None) -> str | None:
    return when.isoformat().replace("+00:00", "Z") if when is not None else None


def lease_summary(lease: Lease) -> dict[str, Any]:
    """The lease as a notification shows it (a subset of the API's lease JSON; the state is the one
    it has as the event is derived, which may already be later than the event's)."""
    return {"id": str(lease.pk), "state": lease.state, "user": lease.user.get_username(),
            "team": lease.team.name, "pool": lease.pool.name, "gpu_count": lease.gpu_count,
            "host": lease.host.name if lease.host else None, "priority_class": lease.priority_class.name,
            "created_at": _iso(lease.created_at), "granted_at": _iso(lease.granted_at),
            "expires_at": _iso(lease.expires_at), "ended_at": _iso(lease.ended_at), "reason": lease.reason}


def _who(lease: Lease) -> str:
    where = f" on {lease.host.name}" if lease.host else ""
    return (f"lease {str(lease.pk)[:8]} of {lease.user.get_username()} ({lease.team.name}, "
            f"{lease.gpu_count} GPU{'s' if lease.gpu_count != 1 else ''} in {lease.pool.name}{where})")


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds / 3600:.1f} h"


def granted_text(lease: Lease, waited_s: float) -> str:
    return f"{_who(lease)} was granted after waiting {_duration(waited_s)}"


def preempted_extra(lease: Lease, occurred_at: datetime) -> tuple[str, dict[str, Any]]:
    """A preemption's words, grace and deadline: a lease whose workload runs (or that was given
    notice) keeps its GPUs for its class's grace; one that held nothing running lost them at once."""
    ended = lease.ended_at or occurred_at
    grace = lease.priority_class.grace_s if lease.ending_since is not None or lease.has_workload else 0
    deadline = ended + timedelta(seconds=grace)
    tail = (f"its workload is stopped at {deadline:%H:%M:%S} UTC ({grace} s grace)" if grace
            else "its GPUs were taken at once")
    why = f": {lease.reason}" if lease.reason else ""
    return f"{_who(lease)} was preempted; {tail}{why}", {"grace_s": grace, "grace_deadline": _iso(deadline)}


def lost_text(lease: Lease) -> str:
    requeued = "; it was requeued and waits to be placed again" if lease.state == "pending" else ""
    return f"{_who(lease)} was lost: {lease.reason or 'its host or GPUs went away'}{requeued}"


def expiring_extra(lease: Lease, expires_at: datetime, now: datetime) -> tuple[str, dict[str, Any]]:
    left = (expires_at - now).total_seconds()
    text = (f"{_who(lease)} expires in {_duration(left)} (at {expires_at:%H:%M:%S} UTC) "
            f"unless renewed: `gpupool renew {str(lease.pk)[:8]}`")
    return text, {"expires_at": _iso(expires_at), "expires_in_s": round(left)}


def idle_text(lease: Lease, warning: str) -> str:
    return f"{_who(lease)}: {warning}"


def budget_text(team: str, message: str) -> str:
    return f"team {team}: {message}"
