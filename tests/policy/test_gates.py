"""Admission gates: one ordered list that both policies run before they look for room."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest

from allocation.policy import gates
from allocation.policy.codes import PendingCode
from allocation.policy.fair import schedule as fair
from allocation.policy.fifo import schedule as fifo
from allocation.policy.gates import GateContext, Refusal, admit
from allocation.policy.placement import Group
from allocation.policy.state import PassState, build_pass
from allocation.policy.types import Decisions, QuotaView, RequestView, Snapshot
from tests.policy.factories import fleet, grants, pendings, quotas, req, run, snap

GPUS = fleet(2)  # two hosts of 8
POLICIES = pytest.mark.parametrize("policy", [fair, fifo], ids=["fair", "fifo"])


def _refusal(snapshot: Snapshot, request: RequestView) -> Refusal | None:
    """What the gates say of `request` at the start of a pass over `snapshot`."""
    state = build_pass(snapshot, {request.pool})
    groups = state.pool(request.pool).index.groups_for(request)
    return admit(request, groups, GateContext.of(state, request.pool))


def test_the_gates_are_one_ordered_list() -> None:
    order = (gates.asks_for_gpus, gates.gpus_match, gates.fits_pool, gates.team_limit,
             gates.lending_limit)
    assert order == gates.GATES


def test_a_request_the_pool_could_serve_passes_every_gate() -> None:
    assert _refusal(snap(GPUS, quota=quotas(("a", 0, 8))), req("r", "a", 8)) is None


def test_a_request_for_no_gpus_is_refused_for_good() -> None:
    refusal = _refusal(snap(GPUS), req("r", "a", 0))
    assert refusal == Refusal("no_gpus", "asks for no GPUs", unsatisfiable=True)


def test_no_matching_gpu_is_final_only_while_no_gpu_is_out_of_service() -> None:
    refusal = _refusal(snap(GPUS), req("r", "a", 1, model="B200"))
    assert refusal == Refusal("no_match", "no GPU of model B200 in pool p", unsatisfiable=True)
    cordoned = tuple(replace(g, schedulable=g.id != 1) for g in GPUS)
    refusal = _refusal(snap(cordoned), req("r", "a", 1, model="B200"))
    assert refusal is not None and refusal.code == "no_match" and not refusal.unsatisfiable


def test_a_pool_without_gpus_matches_nothing() -> None:
    refusal = _refusal(snap(GPUS), req("r", "a", 1, pool="nowhere"))
    assert refusal == Refusal("no_match", "pool nowhere has no schedulable GPUs", True)


def test_larger_than_any_host_or_the_pool_is_refused() -> None:
    refusal = _refusal(snap(GPUS), req("r", "a", 9))
    assert refusal is not None and refusal.code == "too_big" and refusal.unsatisfiable
    assert _refusal(snap(GPUS), req("r", "a", 9, same_host=False)) is None
    refusal = _refusal(snap(GPUS), req("r", "a", 17, same_host=False))
    assert refusal is not None and refusal.message == (
        "asks for 17 GPUs, but pool p has only 16 matching GPUs")


def test_above_the_team_limit_is_final_and_at_it_waits() -> None:
    running = [run("held", "a", [g.id for g in GPUS[:6]], ending=True)]
    snapshot = snap(GPUS, running=running, quota=quotas(("a", 0, 8)))
    over = _refusal(snapshot, req("r", "a", 9, same_host=False))
    assert over == Refusal("over_limit", "asks for 9 GPUs, above team a's limit 8 in pool p", True)
    at = _refusal(snapshot, req("r", "a", 3))  # ending leases still hold their GPUs
    assert at == Refusal("at_limit", "team a at its limit 8 in pool p (holds or awaits 6, asks for 3)")
    assert _refusal(snapshot, req("r", "a", 2)) is None
    assert _refusal(snapshot, req("r", "b", 8)) is None  # another team's limit


def test_the_first_refusal_in_order_is_the_reason() -> None:
    snapshot = snap(GPUS, quota=quotas(("a", 0, 4)))
    both = _refusal(snapshot, req("r", "a", 9))  # larger than a host, and than the limit
    assert both is not None and both.code == "too_big"


@POLICIES
def test_both_policies_keep_a_refused_request_pending_with_the_gate_reason(
        policy: Callable[[Snapshot], Decisions]) -> None:
    pending = [req("none", "a", 0), req("model", "a", 1, model="B200"), req("huge", "a", 9),
               req("over", "capped", 3), req("at", "capped", 2, created_at=1),
               req("ok", "capped", 2, created_at=0)]
    d = policy(snap(GPUS, pending, quota=quotas(("capped", 0, 2))))
    items = pendings(d)
    assert set(grants(d)) == {"ok"}
    assert {k: (p.reason, p.unsatisfiable) for k, p in items.items()} == {
        "none": ("asks for no GPUs", True),
        "model": ("no GPU of model B200 in pool p", True),
        "huge": ("asks for 9 GPUs on one host, but no host in pool p has more than 8 matching GPUs",
                 True),
        "over": ("asks for 3 GPUs, above team capped's limit 2 in pool p", True),
        "at": ("team capped at its limit 2 in pool p (holds or awaits 2, asks for 2)", False),
    }


@POLICIES
def test_a_new_rule_is_one_gate_in_the_list(policy: Callable[[Snapshot], Decisions],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # A real rule names its code in allocation.policy.codes.PendingCode (the enum cannot be
    # extended here); the one it borrows stands in for it.
    def budget(request: RequestView, groups: Sequence[Group], ctx: GateContext) -> Refusal | None:
        if request.team == "broke":
            return Refusal(PendingCode.LENDING_LIMIT, f"team {request.team} has spent its GPU-hours")
        return None

    monkeypatch.setattr(gates, "GATES", (*gates.GATES, budget))
    d = policy(snap(GPUS, [req("b", "broke", 1), req("r", "rich", 1)]))
    assert set(grants(d)) == {"r"}
    assert pendings(d)["b"].reason == "team broke has spent its GPU-hours"
    assert pendings(d)["b"].code == "lending_limit"
    assert not pendings(d)["b"].unsatisfiable


@POLICIES
def test_the_gate_context_is_built_once_per_pool_and_pass(
        policy: Callable[[Snapshot], Decisions], monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    of = GateContext.of

    def counting(state: PassState, pool: str) -> GateContext:
        built.append(pool)
        return of(state, pool)

    monkeypatch.setattr(GateContext, "of", staticmethod(counting))
    gpus = GPUS + fleet(1, pool="q", prefix="q", start_id=101)
    policy(snap(gpus, [req(f"r{i}", "a", 1, pool="pq"[i % 2]) for i in range(40)]))
    assert sorted(built) == ["p", "q"]


# --- lending_limit ---------------------------------------------------------------------------------


def _lending(*rows: tuple[str, int, int | None, int | None]) -> dict[tuple[str, str], QuotaView]:
    """(team, guaranteed, limit, lending limit) per quota of pool p."""
    return {(t, "p"): QuotaView(t, "p", g, lim, lend) for t, g, lim, lend in rows}


LENDER = _lending(("lender", 8, None, 2))  # 16 GPUs: 8 unguaranteed, 2 of lender's 8 lendable
KEEPS_6 = ("team lender keeps 6 GPUs of its idle guarantee unlent "
           "(guaranteed 8, lending limit 2)")


def test_borrowing_beyond_what_idle_teams_lend_waits_with_who_keeps_what() -> None:
    assert _refusal(snap(GPUS, quota=LENDER), req("r", "a", 10, same_host=False)) is None
    refusal = _refusal(snap(GPUS, quota=LENDER), req("r", "a", 11, same_host=False))
    assert refusal == Refusal("lending_limit", "would borrow 11 GPUs above team a's guarantee 0 in "
                                               f"pool p, but only 10 may be lent now: {KEEPS_6}")


def test_what_may_be_lent_counts_every_team_holding_and_the_lenders_own_use() -> None:
    others = [run("x", "x", range(1, 7))]  # 6 of the 8 unguaranteed GPUs are borrowed already
    refusal = _refusal(snap(GPUS, running=others, quota=LENDER), req("r", "a", 5))
    assert refusal is not None and "only 4 may be lent now" in refusal.message
    # The lender's own use comes out of what it keeps back: using 3 of its 8 it keeps 3 back
    # (8 - 3 - 2), and the same 4 may be lent.
    busy = [*others, run("own", "lender", range(9, 12))]
    assert _refusal(snap(GPUS, running=busy, quota=LENDER), req("r", "a", 4)) is None
    refusal = _refusal(snap(GPUS, running=busy, quota=LENDER), req("r", "a", 5))
    assert refusal is not None and refusal.message.endswith(
        "only 4 may be lent now: team lender keeps 3 GPUs of its idle guarantee unlent "
        "(guaranteed 8, lending limit 2)")


def test_a_request_within_its_guarantee_is_never_refused_by_the_lending_limit() -> None:
    quota = _lending(("lender", 8, None, 0), ("a", 8, None, None))
    assert _refusal(snap(GPUS, quota=quota), req("r", "a", 8)) is None
    refusal = _refusal(snap(GPUS, quota=quota), req("r", "a", 9, same_host=False))
    # Its own idle guarantee (8) is its to use, not lent to it: nothing more may be lent.
    assert refusal is not None and refusal.message.startswith(
        "would borrow 1 GPU above team a's guarantee 8 in pool p, but only 0 may be lent now")


def test_the_lending_limit_costs_nothing_while_every_team_lends_its_whole_guarantee() -> None:
    whole = _lending(("lender", 8, None, 8), ("other", 8, None, None))
    state = build_pass(snap(GPUS, quota=whole), {"p"})
    assert GateContext.of(state, "p").lending is None
    assert _refusal(snap(GPUS, quota=whole), req("r", "a", 16, same_host=False)) is None


def test_a_lender_that_uses_its_unlent_part_keeps_nothing_back() -> None:
    used = [run("own", "lender", range(9, 15))]  # 6 = guaranteed - lending limit
    assert _refusal(snap(GPUS, running=used, quota=LENDER), req("r", "a", 10, same_host=False)) is None


def test_the_limit_gate_wins_over_the_lending_limit() -> None:
    quota = {**LENDER, **_lending(("a", 0, 4, None))}
    refusal = _refusal(snap(GPUS, quota=quota), req("r", "a", 12, same_host=False))
    assert refusal is not None and refusal.code == "over_limit"


def test_guarantees_above_the_pool_count_as_quota_as_kueue_does() -> None:
    # Guarantees of 20 on 16 GPUs: the lender's 2 lendable GPUs may be borrowed, no more.
    quota = _lending(("lender", 8, None, 2), ("busy", 12, None, None))
    busy = [run("b", "busy", range(1, 13))]
    assert _refusal(snap(GPUS, running=busy, quota=quota), req("r", "a", 2)) is None
    refusal = _refusal(snap(GPUS, running=busy, quota=quota), req("r", "a", 3))
    assert refusal is not None and "only 2 may be lent now" in refusal.message


@POLICIES
def test_both_policies_keep_a_borrower_beyond_the_lending_limit_pending(
        policy: Callable[[Snapshot], Decisions]) -> None:
    pending = [req("big", "a", 11, same_host=False, created_at=0), req("fits", "a", 4, created_at=1),
               req("more", "b", 8, created_at=2)]
    d = policy(snap(GPUS, pending, quota=LENDER))
    assert set(grants(d)) == {"fits"} and grants(d)["fits"].borrowed
    assert {k: (p.reason, p.unsatisfiable) for k, p in pendings(d).items()} == {
        "big": ("would borrow 11 GPUs above team a's guarantee 0 in pool p, but only 10 may be "
                f"lent now: {KEEPS_6}", False),
        # 4 granted in this pass: the book the gate reads changes as the pass goes.
        "more": ("would borrow 8 GPUs above team b's guarantee 0 in pool p, but only 6 may be "
                 f"lent now: {KEEPS_6}", False),
    }


@POLICIES
def test_what_the_lender_keeps_back_stays_free_for_it(
        policy: Callable[[Snapshot], Decisions]) -> None:
    borrowed = [run("x", "x", range(1, 11), borrowed=True)]  # 8 unguaranteed + the 2 lent
    pending = [req("more", "a", 1, created_at=0), req("own", "lender", 6, created_at=1)]
    d = policy(snap(GPUS, pending, borrowed, quota=LENDER))
    assert set(grants(d)) == {"own"} and not grants(d)["own"].borrowed
    # FIFO reaches "more" first, while the lender keeps 6 back; the fair policy serves the
    # guarantee first, and then nothing is kept back: "more" merely waits for room.
    expected = (f"only 0 may be lent now: {KEEPS_6}" if policy is fifo
                else "waiting for 1 GPU on one host; none is free in pool p")
    assert pendings(d)["more"].reason.endswith(expected)
