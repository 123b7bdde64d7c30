"""Lease vocabulary shared by models, the state machine, filters and serializers."""

from django.db import models

from allocation.policy import codes


class LeaseState(models.TextChoices):
    PENDING = "pending", "Pending"
    GRANTED = "granted", "Granted"
    BOUND = "bound", "Bound"
    RELEASED = "released", "Released"
    EXPIRED = "expired", "Expired"
    PREEMPTED = "preempted", "Preempted"
    FAILED = "failed", "Failed"
    LOST = "lost", "Lost"


# States in which a lease holds GPUs.
HOLDING_STATES = (LeaseState.GRANTED, LeaseState.BOUND)
ACTIVE_STATES = (LeaseState.PENDING, *HOLDING_STATES)
END_STATES = (LeaseState.RELEASED, LeaseState.EXPIRED, LeaseState.PREEMPTED, LeaseState.FAILED,
              LeaseState.LOST)

# Why a lease was preempted, as its `lease.preempt` audit event and `gpupool_preemptions_total`
# say: the pass's causes (`allocation.policy.types.Preemption.kind`: reclaim, priority,
# fair_share), idle reclaim (allocation.services.idle) and an admin's drain of the lease's host
# (allocation.services.admin, a capacity move in drain mode too).
PREEMPTION_CAUSES = ("priority", "reclaim", "fair_share", "idle", "drain")


# Why a pending lease waits (allocation.policy.codes.PendingCode, the one list, whose members the
# writers use): the model's, the filters' and the serializers' choices. "" on a lease that is not
# pending.
PENDING_CODES: list[tuple[str, str]] = [(code.value, codes.LABELS[code]) for code in codes.PendingCode]


class BindingKind(models.TextChoices):
    NONE = "", "None"
    PROCESS = "process", "Process over SSH"
    POD = "pod", "Kubernetes pod"
    SESSION = "session", "Shell session (SSH)"


class ReservationState(models.TextChoices):
    """`active` until cancelled; one whose end has passed reads as `ended`
    (`Reservation.current_state`), without a write at the end."""

    ACTIVE = "active", "Active"
    CANCELLED = "cancelled", "Cancelled"
    ENDED = "ended", "Ended"


class BudgetPeriod(models.TextChoices):
    """Calendar periods in UTC (allocation.policy.metering.period_start)."""

    WEEK = "week", "ISO week (from Monday)"
    MONTH = "month", "Calendar month"
    QUARTER = "quarter", "Calendar quarter"


class BudgetAction(models.TextChoices):
    """What a spent budget does to the team's new leases (it warns at 80% and 100% whatever)."""

    WARN = "warn", "Warn only"
    BLOCK_NEW = "block_new", "Refuse new leases"
    LOWER_PRIORITY = "lower_priority", "Demote new leases to the lowest priority class"
