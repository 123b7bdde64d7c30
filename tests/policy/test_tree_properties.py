"""Invariants of both policies over random team trees: a department's limit caps what its teams
hold once the pass's grants are in (unless they held more before it: nothing is taken back for
a limit), and every pending request is decided exactly once."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocation.policy.fair import schedule as fair
from allocation.policy.fifo import schedule as fifo
from allocation.policy.types import QuotaView, Snapshot, TeamView
from tests.policy.test_properties import snapshots

# Teams a, b under department D (itself under root R); c alone under R.
PARENTS = {"a": "D", "b": "D", "D": "R", "c": "R"}


@st.composite
def tree_snapshots(draw: st.DrawFn) -> Snapshot:
    base = draw(snapshots())
    teams = {name: replace(view, parent=PARENTS.get(name, "")) for name, view in base.teams.items()}
    teams.update({n: TeamView(n, draw(st.sampled_from((1.0, 2.0))), 0.0, PARENTS.get(n, "")) for n in ("D", "R")})
    quotas = dict(base.quotas)
    for node in ("D", "R"):
        for pool in ("p", "q"):
            if draw(st.booleans()):
                children = [t for t, p in PARENTS.items() if p == node]
                floor = sum(quotas[(c, pool)].guaranteed for c in children if (c, pool) in quotas)
                limit = draw(st.one_of(st.none(), st.integers(floor, floor + 12)))
                quotas[(node, pool)] = QuotaView(node, pool, floor, limit)
    return replace(base, teams=teams, quotas=quotas)


def _subtree_held(snapshot: Snapshot, extra: dict[str, int] | None = None) -> dict[tuple[str, str], int]:
    held: dict[tuple[str, str], int] = defaultdict(int)
    for run in snapshot.running:
        held[(run.team, run.pool)] += len(run.gpu_ids)
    for key, n in (extra or {}).items():
        held[(key.split("@")[0], key.split("@")[1])] += n
    out: dict[tuple[str, str], int] = defaultdict(int)
    for (team, pool), n in held.items():
        node: str | None = team
        while node:
            out[(node, pool)] += n
            node = PARENTS.get(node)
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree_snapshots())
def test_department_limits_hold_and_every_request_is_decided_once(snapshot: Snapshot) -> None:
    requests = {r.lease_id: r for r in snapshot.pending}
    before = _subtree_held(snapshot)
    for policy in (fair, fifo):
        d = policy(snapshot)
        decided = [g.lease_id for g in d.grants] + [p.lease_id for p in d.pending]
        assert sorted(decided) == sorted(requests)
        granted: dict[str, int] = defaultdict(int)
        for g in d.grants:
            req = requests[g.lease_id]
            granted[f"{req.team}@{req.pool}"] += req.gpus
        after = _subtree_held(snapshot, granted)
        for (node, pool), quota in snapshot.quotas.items():
            if node in ("D", "R") and quota.limit is not None:
                assert after[(node, pool)] <= max(quota.limit, before[(node, pool)]), (node, pool)
