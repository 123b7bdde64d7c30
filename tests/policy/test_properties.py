"""Invariants of both policies on random fleets, quotas, running leases and requests."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from allocation.policy import Policy
from allocation.policy.fair import schedule as fair
from allocation.policy.fifo import schedule as fifo
from allocation.policy.matching import constraint_of, kind_eligible, kind_of
from allocation.policy.types import (
    Decisions,
    GpuView,
    QuotaView,
    RequestView,
    RunningView,
    Snapshot,
    TeamView,
)
from allocation.policy.where import selector_of

TEAMS = ("a", "b", "c")
# (source, workload kinds it starts, placement domain): SSH hosts, and two Kubernetes clusters.
SOURCES = (("lab", frozenset({"process"}), "ssh"), ("ka", frozenset({"pod"}), "ka"),
           ("kb", frozenset({"pod"}), "kb"))
SELECT_KA = selector_of({"source": "ka"})
MODELS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB")
NOW = 100_000.0


@st.composite
def snapshots(draw: st.DrawFn, simple: bool = False) -> Snapshot:
    """A consistent random snapshot. `simple`: one model, 1-GPU running leases, nothing ending,
    no min runtime, no constraints, guarantees that fit the fleet (guarantees must be reachable)."""
    pools = ("p",) if simple else ("p", "q")
    gpus: list[GpuView] = []
    for h in range(draw(st.integers(1, 6))):
        pool = draw(st.sampled_from(pools))
        model = MODELS[0] if simple else draw(st.sampled_from(MODELS))
        memory = 81559 if "H100" in model else 40960
        source, workloads, domain = SOURCES[0 if simple else draw(st.integers(0, 2))]
        tags = frozenset({SELECT_KA.tag}) if source == "ka" else frozenset()
        for _ in range(draw(st.integers(1, 8))):
            ok = simple or draw(st.integers(0, 9)) > 0
            gpus.append(GpuView(len(gpus) + 1, pool, f"{pool}-h{h}", model, memory, "550.54",
                                "12.4", schedulable=ok, workloads=workloads, domain=domain, tags=tags))
    free = [g for g in gpus if g.schedulable]
    running: list[RunningView] = []
    order = draw(st.permutations(range(len(free))))
    taken = order[:draw(st.integers(0, len(free)))]
    i = 0
    while i < len(taken):
        size = 1 if simple else draw(st.integers(1, 4))
        pool = free[taken[i]].pool
        chunk = [free[j].id for j in taken[i:i + size] if free[j].pool == pool]
        i += size
        running.append(RunningView(
            f"r{len(running)}", draw(st.sampled_from(TEAMS)), pool, tuple(chunk),
            priority=draw(st.sampled_from((-10, 0, 100))), preemptible=draw(st.booleans()),
            granted_at=NOW - draw(st.sampled_from((10, 10_000))),
            borrowed=draw(st.booleans()),
            min_runtime_s=0 if simple else draw(st.sampled_from((0, 600))),
            expected_end=draw(st.one_of(st.none(), st.floats(NOW, NOW + 1e5))),
            ending=False if simple else draw(st.integers(0, 5)) == 0))
    quotas: dict[tuple[str, str], QuotaView] = {}
    budget = {p: sum(1 for g in free if g.pool == p) for p in pools}
    for team in TEAMS:
        for pool in pools:
            if draw(st.booleans()):
                guaranteed = draw(st.integers(0, max(0, budget[pool])))
                if simple:
                    budget[pool] -= guaranteed
                limit = draw(st.one_of(st.none(), st.integers(guaranteed, guaranteed + 16)))
                quotas[(team, pool)] = QuotaView(team, pool, guaranteed, None if simple else limit)
    pending = []
    for n in range(draw(st.integers(0, 12))):
        pending.append(RequestView(
            f"q{n}", draw(st.sampled_from(TEAMS)), draw(st.sampled_from(pools)),
            draw(st.integers(1, 10)), priority=draw(st.sampled_from((-10, 0, 100))),
            created_at=float(draw(st.integers(0, 50))),
            model="" if simple else draw(st.sampled_from(("", "H100", "a100|h100", "B200"))),
            min_memory_mb=0 if simple else draw(st.sampled_from((0, 50_000))),
            same_host=False if simple else draw(st.booleans()),
            expected_duration_s=draw(st.one_of(st.none(), st.floats(1, 1e5))),
            workload="" if simple else draw(st.sampled_from(("", "", "process", "pod"))),
            selector="" if simple else draw(st.sampled_from(("", "", "", SELECT_KA.tag)))))
    teams = {t: TeamView(t, draw(st.sampled_from((0.5, 1.0, 3.0))),
                         draw(st.floats(0, 1e7))) for t in TEAMS}
    return Snapshot(NOW, tuple(gpus), teams, quotas, tuple(running), tuple(pending))


def _held(snapshot: Snapshot) -> dict[tuple[str, str], int]:
    held: dict[tuple[str, str], int] = defaultdict(int)
    for run in snapshot.running:
        held[(run.team, run.pool)] += len(run.gpu_ids)
    return held


def _check_grants(snapshot: Snapshot, policy: Policy) -> None:
    d = policy(snapshot)
    gpus = {g.id: g for g in snapshot.gpus}
    requests = {r.lease_id: r for r in snapshot.pending}
    busy = {g for run in snapshot.running for g in run.gpu_ids}
    decided = [g.lease_id for g in d.grants] + [p.lease_id for p in d.pending]
    assert sorted(decided) == sorted(requests), "every request is granted or pending, once"
    held = _held(snapshot)
    for grant in d.grants:
        req = requests[grant.lease_id]
        assert len(grant.gpu_ids) == len(set(grant.gpu_ids)) == req.gpus, "all or nothing"
        assert not busy & set(grant.gpu_ids), "no GPU granted twice"
        busy |= set(grant.gpu_ids)
        views = [gpus[g] for g in grant.gpu_ids]
        assert all(v.schedulable and v.pool == req.pool for v in views)
        assert len({v.model for v in views}) == 1, "one model per lease"
        assert all(kind_eligible(kind_of(v), constraint_of(req), req.team) for v in views)
        if req.same_host:
            assert {v.host for v in views} == {grant.host}
        assert len({v.domain for v in views}) == 1, "a lease never spans two clusters or kinds"
        held[(req.team, req.pool)] += req.gpus
    before = _held(snapshot)
    for key, quota in snapshot.quotas.items():
        if quota.limit is not None and held[key] > before[key]:
            assert held[key] <= quota.limit, "limits are never exceeded"
    positions = defaultdict(list)
    for item in d.pending:
        positions[requests[item.lease_id].pool].append(item.queue_position)
        assert item.reason
    for values in positions.values():
        assert sorted(values) == list(range(1, len(values) + 1))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_fair_grants_are_valid_all_or_nothing_and_within_limits(snapshot: Snapshot) -> None:
    _check_grants(snapshot, fair)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_fifo_grants_are_valid_all_or_nothing_and_within_limits(snapshot: Snapshot) -> None:
    _check_grants(snapshot, fifo)
    assert not fifo(snapshot).preemptions


def _victim_keeps_guarantee_thanks_to(promise: bool) -> Snapshot:
    """Team x holds exactly its guarantee in two preemptible low-priority leases and, in the same
    pass, is granted (or promised, `promise`) two more GPUs ahead of team y (y has used much
    lately), whose higher-priority request then preempts one or both old leases of x: x keeps
    its guarantee only counting what this pass gave it."""
    gpus = tuple(GpuView(i, "p", "p-h0", MODELS[0], 81559, "550.54", "12.4") for i in range(1, 7))
    low = {"priority": -10, "preemptible": True, "granted_at": NOW - 10}
    running = [RunningView("x1", "x", "p", (1, 2), **low),  # type: ignore[arg-type]
               RunningView("x2", "x", "p", (3, 4), **low)]  # type: ignore[arg-type]
    if promise:  # no free GPU: x's request waits for an ending lease of z
        running.append(RunningView("z1", "z", "p", (5, 6), granted_at=NOW - 10, ending=True))
    pending = (RequestView("xq", "x", "p", 2, priority=100, created_at=1.0, same_host=False),
               RequestView("yq", "y", "p", 4 if promise else 2, priority=100, created_at=2.0,
                           same_host=False))
    teams = {t: TeamView(t, 1.0, 1e9 if t == "y" else 0.0) for t in ("x", "y", "z")}
    quotas = {("x", "p"): QuotaView("x", "p", 2 if promise else 4)}
    return Snapshot(NOW, gpus, teams, quotas, tuple(running), pending)


def _after_pass(snapshot: Snapshot, d: Decisions) -> dict[tuple[str, str], int]:
    """GPUs per (team, pool) the pass granted or promised: a promised request waits for GPUs
    being freed for it (ending leases, or the preemptions it started) and counts as held."""
    requests = {r.lease_id: r for r in snapshot.pending}
    out: dict[tuple[str, str], int] = defaultdict(int)
    promised = [p.lease_id for p in d.pending if " being freed by " in p.reason]
    for lease_id in [g.lease_id for g in d.grants] + promised:
        req = requests[lease_id]
        out[(req.team, req.pool)] += req.gpus
    return out


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
@example(_victim_keeps_guarantee_thanks_to(promise=False))
@example(_victim_keeps_guarantee_thanks_to(promise=True))
def test_victims_are_preemptible_or_borrowed_and_guarantees_are_kept(snapshot: Snapshot) -> None:
    d = fair(snapshot)
    running = {r.lease_id: r for r in snapshot.running}
    requests = {r.lease_id: r for r in snapshot.pending}
    lost: dict[tuple[str, str], int] = defaultdict(int)
    assert len({p.lease_id for p in d.preemptions}) == len(d.preemptions), "one stop per victim"
    for stop in d.preemptions:
        victim, by = running[stop.lease_id], requests[stop.by_lease_id]
        assert not victim.ending, "never preempt an ending lease again"
        assert NOW - victim.granted_at >= victim.min_runtime_s, "min runtime honoured"
        assert victim.pool == by.pool
        lower = victim.preemptible and victim.priority < by.priority
        assert lower or victim.team != by.team, "own leases only for priority"
        if victim.team != by.team:
            lost[(victim.team, victim.pool)] += len(victim.gpu_ids)
            assert lower or stop.kind == "reclaim"
    held = _held(snapshot)
    leaving: dict[tuple[str, str], int] = defaultdict(int)
    for run in snapshot.running:
        if run.ending:
            leaving[(run.team, run.pool)] += len(run.gpu_ids)
    # What the victim team holds once the pass is carried out: its grants and promises of this
    # pass count (the policy lends out capacity above the guarantee whatever its age).
    gained = _after_pass(snapshot, d)
    for key, gone in lost.items():
        quota = snapshot.quotas.get(key)
        guaranteed = quota.guaranteed if quota else 0
        assert held[key] - leaving[key] - gone + gained[key] >= guaranteed, \
            "victims keep their guarantee"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots(simple=True))
def test_a_team_below_its_guarantee_gets_its_request_or_preemptions(snapshot: Snapshot) -> None:
    d = fair(snapshot)
    held = _held(snapshot)
    served = {r.team for r in snapshot.pending
              if r.lease_id in {g.lease_id for g in d.grants} |
              {p.by_lease_id for p in d.preemptions}}
    for req in snapshot.pending:
        quota = snapshot.quotas.get((req.team, req.pool))
        if quota is not None and held[(req.team, req.pool)] + req.gpus <= quota.guaranteed:
            assert req.team in served, f"{req.team} is owed {req.gpus} GPUs"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_skipping_estimated_starts_never_changes_a_decision(snapshot: Snapshot) -> None:
    from dataclasses import replace

    full, lean = fair(snapshot), fair(replace(snapshot, estimate_starts=False))
    assert (full.grants, full.preemptions) == (lean.grants, lean.preemptions)
    assert [(p.lease_id, p.reason, p.queue_position) for p in full.pending] == \
        [(p.lease_id, p.reason, p.queue_position) for p in lean.pending]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_a_team_that_preempts_or_is_granted_ends_within_its_limit(snapshot: Snapshot) -> None:
    _check_final_limits(snapshot)


def _check_final_limits(snapshot: Snapshot) -> None:
    """Once the ending leases and the victims are gone and every request that was granted or
    started preemptions holds its GPUs, no team that gained GPUs is above its limit; a victim
    of its own team is preemptible, of lower priority and past its minimum runtime."""
    d = fair(snapshot)
    requests = {r.lease_id: r for r in snapshot.pending}
    stopped = {p.lease_id for p in d.preemptions}
    final: dict[tuple[str, str], int] = defaultdict(int)
    for run in snapshot.running:
        if not run.ending and run.lease_id not in stopped:
            final[(run.team, run.pool)] += len(run.gpu_ids)
    gainers = {g.lease_id for g in d.grants} | {p.by_lease_id for p in d.preemptions}
    for lease_id in gainers:
        req = requests[lease_id]
        final[(req.team, req.pool)] += req.gpus
    for lease_id in gainers:
        quota = snapshot.quotas.get((requests[lease_id].team, requests[lease_id].pool))
        if quota is not None and quota.limit is not None:
            assert final[(quota.team, quota.pool)] <= quota.limit
    for stop in d.preemptions:
        victim = next(r for r in snapshot.running if r.lease_id == stop.lease_id)
        by = requests[stop.by_lease_id]
        if victim.team == by.team:
            assert victim.preemptible and victim.priority < by.priority, "own team: lower only"
            assert NOW - victim.granted_at >= victim.min_runtime_s


@st.composite
def teams_at_their_limit(draw: st.DrawFn) -> Snapshot:
    """`snapshots()` with every team's limit set to what it holds (at least 1) in each pool:
    the requests that are not refused outright preempt within their own team or wait."""
    base = draw(snapshots())
    held = _held(base)
    quotas = {}
    for team in TEAMS:
        for pool in ("p", "q"):
            limit = max(1, held[(team, pool)] - draw(st.integers(0, 1)))
            quotas[(team, pool)] = QuotaView(team, pool, min(limit, draw(st.integers(0, 4))),
                                             limit)
    return Snapshot(base.now, base.gpus, base.teams, quotas, base.running, base.pending)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(teams_at_their_limit())
def test_teams_at_their_limit_end_within_it(snapshot: Snapshot) -> None:
    _check_final_limits(snapshot)
    _check_grants(snapshot, fair)


@st.composite
def lending_snapshots(draw: st.DrawFn) -> Snapshot:
    """Empty pools (nothing running, so nothing is promised or preempted and what a team holds
    is what the pass granted it), quotas with random lending limits, a queue of requests."""
    gpus: list[GpuView] = []
    for h in range(draw(st.integers(1, 4))):
        pool = draw(st.sampled_from(("p", "q")))
        for _ in range(draw(st.integers(1, 8))):
            gpus.append(GpuView(len(gpus) + 1, pool, f"{pool}-h{h}", MODELS[0], 81559))
    quotas: dict[tuple[str, str], QuotaView] = {}
    for team in TEAMS:
        for pool in ("p", "q"):
            if draw(st.booleans()):
                guaranteed = draw(st.integers(0, 12))
                lending = draw(st.one_of(st.none(), st.integers(0, guaranteed)))
                quotas[(team, pool)] = QuotaView(team, pool, guaranteed, None, lending)
    pending = tuple(RequestView(f"q{n}", draw(st.sampled_from(TEAMS)), draw(st.sampled_from(("p", "q"))),
                                draw(st.integers(1, 8)), priority=draw(st.sampled_from((0, 100))),
                                created_at=float(n), same_host=draw(st.booleans()))
                    for n in range(draw(st.integers(1, 14))))
    teams = {t: TeamView(t, 1.0, draw(st.floats(0, 1e6))) for t in TEAMS}
    return Snapshot(NOW, tuple(gpus), teams, quotas, (), pending)


def _borrowing_within_what_may_be_lent(snapshot: Snapshot, held: dict[tuple[str, str], int],
                                       pool: str) -> bool:
    """Kueue's form: Σ borrowed ≤ max(0, C − ΣG) + Σ min(lending limit, idle guarantee)."""
    quotas = [q for (_, p), q in snapshot.quotas.items() if p == pool]
    guaranteed = {q.team: q.guaranteed for q in quotas}
    capacity = sum(1 for g in snapshot.gpus if g.pool == pool)
    borrowed = sum(max(0, held[(t, pool)] - guaranteed.get(t, 0)) for t in TEAMS)
    lendable = max(0, capacity - sum(guaranteed.values())) + sum(
        min(q.guaranteed if q.lending_limit is None else q.lending_limit,
            max(0, q.guaranteed - held[(q.team, pool)])) for q in quotas)
    return borrowed <= lendable


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lending_snapshots())
def test_no_grant_makes_borrowing_exceed_what_may_be_lent(snapshot: Snapshot) -> None:
    requests = {r.lease_id: r for r in snapshot.pending}
    for policy in (fair, fifo):
        held: dict[tuple[str, str], int] = defaultdict(int)
        for grant in policy(snapshot).grants:
            req = requests[grant.lease_id]
            held[(req.team, req.pool)] += req.gpus
            # A grant within the team's guarantee may take back what others borrowed (its
            # owner reclaims it); one that borrows never goes beyond what may be lent.
            if grant.borrowed:
                assert _borrowing_within_what_may_be_lent(snapshot, held, req.pool), policy
