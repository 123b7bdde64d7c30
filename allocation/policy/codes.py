"""Why a lease is pending, as a stable code: the one list of them.

Every pending entry a pass decides carries one of these codes beside the prose reason
(explain.py): the API filters leases by it (`GET leases/?pending_code=`), `/metrics` counts
pending leases by it (`gpupool_leases_pending{pool,code}`), the queue page offers it as a filter.
The prose may change wording from release to release; a code never changes meaning (Slurm's
`squeue %r` reasons, Kueue's Workload condition reasons). A new code is a new member here with
its description; `allocation.choices.PENDING_CODES` derives the database and API choices from it.

The admission gates' `Refusal.code` values (gates.py) are members of this list; the codes at
creation that are API errors rather than reasons to wait (`unsatisfiable`,
`insufficient_capacity`) are not.
"""

from __future__ import annotations

from enum import StrEnum


class PendingCode(StrEnum):
    # Not yet considered by a pass: a new lease, or one requeued after its host was lost.
    NEXT_PASS = "next_pass"
    # Admission gates (gates.py), in their order.
    NO_GPUS = "no_gpus"
    NO_MATCH = "no_match"
    SELECTOR = "selector"
    TOO_BIG = "too_big"
    OVER_LIMIT = "over_limit"
    AT_LIMIT = "at_limit"
    LENDING_LIMIT = "lending_limit"
    # Past the gates: where room is, or is not.
    RESERVATION = "reservation"
    NO_CAPACITY = "no_capacity"
    TOPOLOGY = "topology"
    BEHIND_HIGHER_PRIORITY = "behind_higher_priority"
    WAITING_ENDING = "waiting_ending"
    WAITING_PREEMPTION = "waiting_preemption"
    FAIR_SHARE = "fair_share"


# What each code means, for the API schema, the docs and the queue page's filter. Kept beside
# the members so a new code cannot go undocumented (tests/policy/test_pending_codes.py).
DESCRIPTIONS: dict[PendingCode, str] = {
    PendingCode.NEXT_PASS: "not yet considered by a scheduling pass (new, or requeued after a host loss)",
    PendingCode.NO_GPUS: "asks for no GPUs; never granted",
    PendingCode.NO_MATCH: "no GPU of the pool meets its model, memory, driver, CUDA or workload kind",
    PendingCode.SELECTOR: "no host of the pool matches its selector",
    PendingCode.TOO_BIG: "larger than the matching GPUs of any host (same_host) or of the pool",
    PendingCode.OVER_LIMIT: "asks for more than its team's limit in the pool; never granted",
    PendingCode.AT_LIMIT: "its team holds or awaits its limit in the pool",
    PendingCode.LENDING_LIMIT: "would borrow beyond what other teams may lend of their idle guarantees",
    PendingCode.RESERVATION: "the free GPUs it could use are held by another team's advance reservation",
    PendingCode.NO_CAPACITY: "not enough matching GPUs are free now",
    PendingCode.TOPOLOGY: "enough matching GPUs are free, but not within one NVLink island, host, rack (or the "
                          "level it requires)",
    PendingCode.BEHIND_HIGHER_PRIORITY: "starting it now would delay a higher-priority request waiting for the "
                                        "same GPUs",
    PendingCode.WAITING_ENDING: "GPUs are held for it and it waits for ending leases to free the rest",
    PendingCode.WAITING_PREEMPTION: "leases are being preempted for it (priority, reclaim of a guarantee, or "
                                    "its own team's lower-priority leases)",
    PendingCode.FAIR_SHARE: "leases of a team above its fair share are being preempted for it",
}

# The short label a select shows.
LABELS: dict[PendingCode, str] = {
    PendingCode.NEXT_PASS: "Next pass",
    PendingCode.NO_GPUS: "Asks for no GPUs",
    PendingCode.NO_MATCH: "No matching GPU",
    PendingCode.SELECTOR: "No host matches selector",
    PendingCode.TOO_BIG: "Too big for the pool",
    PendingCode.OVER_LIMIT: "Over team limit",
    PendingCode.AT_LIMIT: "Team at its limit",
    PendingCode.LENDING_LIMIT: "Lending limit",
    PendingCode.RESERVATION: "Reserved for another team",
    PendingCode.NO_CAPACITY: "No free capacity",
    PendingCode.TOPOLOGY: "Waiting for room within its topology",
    PendingCode.BEHIND_HIGHER_PRIORITY: "Behind higher priority",
    PendingCode.WAITING_ENDING: "Waiting for ending leases",
    PendingCode.WAITING_PREEMPTION: "Waiting for preemption",
    PendingCode.FAIR_SHARE: "Waiting for fair-share preemption",
}


def documented() -> str:
    """Every code with its meaning, in order, for the API schema's descriptions."""
    return "; ".join(f"`{code.value}`: {DESCRIPTIONS[code]}" for code in PendingCode)
