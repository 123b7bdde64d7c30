"""Every pending entry carries a stable code beside its reason (allocation.policy.codes): one
scenario per code a pass gives, each read back from the pass's own decisions. `next_pass` is the
one a pass never gives (the lease service and the requeue write it)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from allocation.policy import codes
from allocation.policy.codes import PendingCode
from allocation.policy.fair import schedule as fair
from allocation.policy.fifo import schedule as fifo
from allocation.policy.topology import TopologyView
from allocation.policy.types import Decisions, PoolView, QuotaView, ReservationView, RunningView, Snapshot
from allocation.policy.where import selector_of
from tests.policy.factories import fleet, ids, pendings, quotas, req, run, snap

NOW = 10_000.0
GPUS = fleet(2)  # 16 GPUs on node-0 and node-1
KB = selector_of({"source": "kb"}).tag


def _full(team: str = "z", **kw: Any) -> list[RunningView]:
    """Team `team` holding the whole fleet as four leases of 4 GPUs."""
    return [run(f"{team}{i}", team, ids(GPUS)[4 * i:4 * i + 4], granted_at=float(i), **kw) for i in range(4)]


def _code(decisions: Decisions, lease_id: str) -> str:
    return pendings(decisions)[lease_id].code


SCENARIOS: dict[PendingCode, Callable[[], Snapshot]] = {
    PendingCode.NO_GPUS: lambda: snap(GPUS, [req("x", "a", 0)]),
    PendingCode.NO_MATCH: lambda: snap(GPUS, [req("x", "a", 1, model="B200")]),
    PendingCode.SELECTOR: lambda: snap(GPUS, [req("x", "a", 1, selector=KB)]),
    PendingCode.TOO_BIG: lambda: snap(GPUS, [req("x", "a", 9)]),
    PendingCode.OVER_LIMIT: lambda: snap(GPUS, [req("x", "a", 3)], quota=quotas(("a", 0, 2))),
    PendingCode.AT_LIMIT: lambda: snap(GPUS, [req("x", "a", 1)], [run("held", "a", ids(GPUS)[:2])],
                                       quota=quotas(("a", 0, 2))),
    PendingCode.LENDING_LIMIT: lambda: snap(GPUS, [req("x", "a", 11, same_host=False)],
                                            quota={("lender", "p"): QuotaView("lender", "p", 8, None, 2)}),
    PendingCode.RESERVATION: lambda: snap(GPUS, [req("x", "b", 12, same_host=False)], now=NOW, reservations=(
        ReservationView("r1", "a", "p", 8, NOW - 60, NOW + 3600),)),
    PendingCode.NO_CAPACITY: lambda: snap(GPUS, [req("x", "a", 4)], _full()),
    PendingCode.TOPOLOGY: lambda: snap(
        GPUS, [req("x", "a", 12, same_host=False, within="rack", within_required=True)],
        [run("r0", "z", ids(GPUS)[:2]), run("r1", "z", ids(GPUS)[8:10])],
        topology=TopologyView(("rack",), {"node-0": ("r0",), "node-1": ("r1",)})),
    PendingCode.BEHIND_HIGHER_PRIORITY: lambda: snap(
        GPUS, [req("head", "a", 8, priority=5), req("x", "b", 2, created_at=1, expected_duration_s=3000)],
        [run("r0", "z", ids(GPUS, "node-0")[:6], expected_end=NOW + 1000),
         run("r1", "z", ids(GPUS, "node-1"), expected_end=NOW + 5000)], now=NOW),
    PendingCode.WAITING_ENDING: lambda: snap(GPUS, [req("x", "a", 4, priority=100)],
                                             [*_full()[:3], run("z3", "z", ids(GPUS)[12:], ending=True)]),
    PendingCode.WAITING_PREEMPTION: lambda: snap(GPUS, [req("x", "a", 4, priority=100)],
                                                 _full(preemptible=True, priority=-10)),
    PendingCode.FAIR_SHARE: lambda: snap(
        GPUS, [req("x", "b", 1, same_host=False)],
        [run(f"a{i}", "a", [g.id], granted_at=100.0 + i, borrowed=True) for i, g in enumerate(GPUS)],
        now=NOW, pools={"p": PoolView("p", fair_share_preemption=True)}),
}


def test_every_code_a_pass_gives_has_a_scenario_and_every_code_a_description() -> None:
    assert set(SCENARIOS) == set(PendingCode) - {PendingCode.NEXT_PASS}
    assert set(codes.DESCRIPTIONS) == set(codes.LABELS) == set(PendingCode)
    table = (Path(__file__).resolve().parents[2] / "docs" / "queue.md").read_text()
    assert [f"| `{code.value}` | {codes.DESCRIPTIONS[code]} |" for code in PendingCode if
            f"| `{code.value}` | {codes.DESCRIPTIONS[code]} |" not in table] == []


@pytest.mark.parametrize("code", sorted(SCENARIOS), ids=str)
def test_the_fair_policy_gives_each_code_where_its_reason_applies(code: PendingCode) -> None:
    assert _code(fair(SCENARIOS[code]()), "x") == code


FIFO = (PendingCode.NO_GPUS, PendingCode.NO_MATCH, PendingCode.SELECTOR, PendingCode.TOO_BIG,
        PendingCode.OVER_LIMIT, PendingCode.AT_LIMIT, PendingCode.LENDING_LIMIT, PendingCode.RESERVATION,
        PendingCode.NO_CAPACITY, PendingCode.TOPOLOGY)


@pytest.mark.parametrize("code", FIFO, ids=str)
def test_the_fifo_baseline_gives_the_same_codes_for_the_rules_it_shares(code: PendingCode) -> None:
    assert _code(fifo(SCENARIOS[code]()), "x") == code


@pytest.mark.parametrize("policy", [fair, fifo], ids=["fair", "fifo"])
def test_every_pending_entry_has_a_known_code(policy: Callable[[Snapshot], Decisions]) -> None:
    for scenario in SCENARIOS.values():
        for pending in policy(scenario()).pending:
            assert pending.code in set(PendingCode) and pending.reason


def test_a_team_at_its_limit_that_preempts_its_own_leases_waits_for_the_preemption() -> None:
    own = [run(f"be{i}", "a", [g.id], priority=-10, preemptible=True) for i, g in enumerate(GPUS[:8])]
    d = fair(snap(GPUS, [req("x", "a", 2, priority=10)], own, quota=quotas(("a", 0, 8))))
    assert d.preemptions and _code(d, "x") == PendingCode.WAITING_PREEMPTION
    assert "of its own team" in pendings(d)["x"].reason
