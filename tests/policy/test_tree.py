"""Hierarchical quotas in the policy (tree.py): departments over teams. Each test also runs the
same snapshot without the tree, where the flat policy decides otherwise, so it shows what the
tree changed."""

from __future__ import annotations

from dataclasses import replace

from allocation.policy.codes import PendingCode
from allocation.policy.fair import schedule as fair
from allocation.policy.fifo import schedule as fifo
from allocation.policy.types import QuotaView, Snapshot, TeamView
from tests.policy.factories import fleet, grants, ids, pendings, req, run, snap, victims

# Two departments: A over a1 and a2, B over b1.
PARENTS = {"a1": "A", "a2": "A", "b1": "B"}


def _tree(snapshot: Snapshot) -> Snapshot:
    teams = {n: TeamView(n, 1.0, 0.0, PARENTS.get(n, "")) for n in (*PARENTS, "A", "B")}
    return replace(snapshot, teams=teams)


def _quotas(*rows: tuple[str, int, int | None, int | None]) -> dict[tuple[str, str], QuotaView]:
    return {(t, "p"): QuotaView(t, "p", g, limit, lending) for t, g, limit, lending in rows}


QUOTAS = _quotas(("A", 8, None, None), ("a1", 4, None, None), ("a2", 4, None, None),
                 ("B", 4, None, None), ("b1", 4, None, None))


def test_a_departments_idle_guarantee_goes_to_its_sibling_team_before_another_department() -> None:
    gpus = fleet([4, 4, 4])
    running = [run("a2-own", "a2", ids(gpus, "node-0")), run("b1-own", "b1", ids(gpus, "node-1"))]
    # b1 asked first: flat, with equal shares, the older request wins the 4 free GPUs.
    pending = [req("b1-more", "b1", 4, created_at=1.0), req("a2-more", "a2", 4, created_at=2.0)]
    flat = snap(gpus, pending, running, teams=dict.fromkeys((*PARENTS, "A", "B"), 1.0), quota=QUOTAS)
    assert set(grants(fair(flat))) == {"b1-more"}
    d = fair(_tree(flat))
    assert set(grants(d)) == {"a2-more"}  # a1's idle guarantee is its sibling's first
    assert grants(d)["a2-more"].borrowed
    assert pendings(d)["b1-more"].code == PendingCode.NO_CAPACITY


def test_a_parent_limit_caps_what_its_teams_hold_together() -> None:
    gpus = fleet([8, 8, 8])
    quota = _quotas(("A", 0, 6, None), ("a1", 0, None, None), ("a2", 0, None, None))
    running = [run("a1-run", "a1", ids(gpus, "node-0")[:4])]
    pending = [req("a2-big", "a2", 4), req("a2-small", "a2", 2, created_at=1.0),
               req("a1-huge", "a1", 7, created_at=2.0)]
    flat = snap(gpus, pending, running, quota=quota)
    assert set(grants(fair(flat))) == {"a2-big", "a2-small", "a1-huge"}
    for policy in (fair, fifo):
        d = policy(_tree(flat))
        assert set(grants(d)) == {"a2-small"}  # 4 held + 2 = the department's limit 6
        waiting = pendings(d)
        assert waiting["a2-big"].code == PendingCode.AT_LIMIT
        assert "department A" in waiting["a2-big"].reason and "limit 6" in waiting["a2-big"].reason
        assert waiting["a1-huge"].code == PendingCode.OVER_LIMIT and waiting["a1-huge"].unsatisfiable


def test_reclaim_takes_from_the_farthest_borrower_first() -> None:
    gpus = fleet([6, 6])
    node0, node1 = ids(gpus, "node-0"), ids(gpus, "node-1")
    # a2 borrows 2 of a1's idle guarantee (within A), b1 borrows 2 beyond B's guarantee. a2's
    # borrowed leases are the newest: flat victim order would take them.
    running = [run("a2-own", "a2", node0[:4], granted_at=1.0),
               run("a2-lent1", "a2", node0[4:5], granted_at=9.0, borrowed=True),
               run("a2-lent2", "a2", node0[5:6], granted_at=9.0, borrowed=True),
               run("b1-own", "b1", node1[:4], granted_at=1.0),
               run("b1-lent1", "b1", node1[4:5], granted_at=5.0, borrowed=True),
               run("b1-lent2", "b1", node1[5:6], granted_at=5.0, borrowed=True)]
    pending = [req("a1-back", "a1", 2, same_host=False)]
    flat = snap(gpus, pending, running, teams=dict.fromkeys((*PARENTS, "A", "B"), 1.0), quota=QUOTAS)
    assert victims(fair(flat)) == {"a2-lent1", "a2-lent2"}
    d = fair(_tree(flat))
    assert victims(d) == {"b1-lent1", "b1-lent2"}  # another department's borrowers first
    assert {p.kind for p in d.preemptions} == {"reclaim"}


def test_a_department_lending_limit_keeps_its_idle_guarantee_from_other_departments() -> None:
    gpus = fleet([4, 4, 4])
    quota = _quotas(("A", 8, None, 0), ("a1", 4, None, None), ("a2", 4, None, None),
                    ("B", 4, None, None), ("b1", 4, None, None))
    running = [run("b1-own", "b1", ids(gpus, "node-0"))]
    pending = [req("b1-more", "b1", 4, same_host=False),
               req("a2-more", "a2", 8, same_host=False, created_at=1.0)]
    base = snap(gpus, pending, running, quota=quota)
    d = fair(_tree(base))
    assert set(grants(d)) == {"a2-more"}  # within A: a1's idle guarantee is lent to its sibling
    assert pendings(d)["b1-more"].code == PendingCode.NO_CAPACITY
    for policy in (fair, fifo):  # alone, b1 may not borrow what A keeps back
        only_b = pendings(policy(_tree(replace(base, pending=base.pending[:1]))))["b1-more"]
        assert only_b.code == PendingCode.LENDING_LIMIT
        assert "team A keeps 8" in only_b.reason
    assert set(grants(fair(replace(base, pending=base.pending[:1])))) == {"b1-more"}  # flat


def test_fair_tree_order_compares_departments_before_their_teams() -> None:
    """A holds 6 through a1, B nothing: b1 goes first although a2 (share 0) ties with it."""
    gpus = fleet([8, 2])
    quota = _quotas(("A", 0, None, None), ("B", 0, None, None))
    running = [run("a1-run", "a1", ids(gpus, "node-0")[:6])]
    pending = [req("a2-x", "a2", 2, created_at=0.0), req("b1-x", "b1", 2, created_at=1.0)]
    base = snap(gpus, pending, running, teams=dict.fromkeys((*PARENTS, "A", "B"), 1.0),
                quota=quota)
    d = fair(_tree(replace(base, gpus=gpus[:8])))  # room for one of them only
    assert set(grants(fair(replace(base, gpus=gpus[:8])))) == {"a2-x"}  # flat: the older
    assert set(grants(d)) == {"b1-x"}
