"""Admission gates: one ordered list that both policies run before they look for room."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest

from allocation.policy import gates
from allocation.policy.fair import schedule as fair
from allocation.policy.fifo import schedule as fifo
from allocation.policy.gates import GateContext, Refusal, admit
from allocation.policy.placement import Group
from allocation.policy.state import PassState, build_pass
from allocation.policy.types import Decisions, RequestView, Snapshot
from tests.policy.factories import fleet, grants, pendings, quotas, req, run, snap

GPUS = fleet(2)  # two hosts of 8
POLICIES = pytest.mark.parametrize("policy", [fair, fifo], ids=["fair", "fifo"])


def _refusal(snapshot: Snapshot, request: RequestView) -> Refusal | None:
    """What the gates say of `request` at the start of a pass over `snapshot`."""
    state = build_pass(snapshot, {request.pool})
    groups = state.pool(request.pool).index.groups_for(request)
    return admit(request, groups, GateContext.of(state, request.pool))


def test_the_gates_are_one_ordered_list() -> None:
    order = (gates.asks_for_gpus, gates.gpus_match, gates.fits_pool, gates.team_limit)
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
    def budget(request: RequestView, groups: Sequence[Group], ctx: GateContext) -> Refusal | None:
        if request.team == "broke":
            return Refusal("budget", f"team {request.team} has spent its GPU-hours")
        return None

    monkeypatch.setattr(gates, "GATES", (*gates.GATES, budget))
    d = policy(snap(GPUS, [req("b", "broke", 1), req("r", "rich", 1)]))
    assert set(grants(d)) == {"r"}
    assert pendings(d)["b"].reason == "team broke has spent its GPU-hours"
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
